"""The two vLLM pools on Ray Serve and the application builder `build_app`."""
