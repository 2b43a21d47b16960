"""End-to-end experiments composed of the library's stages: the demo, the reproduce run, the domain study."""
