"""Using a trained adapter: the ``Adapter`` handle, generation, the OpenAI-compatible server, integrations."""
