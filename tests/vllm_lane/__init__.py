"""The vLLM lane (a package, so its conftest is ``vllm_lane.conftest``, not the suite-wide ``conftest``)."""
