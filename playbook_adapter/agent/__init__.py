"""The in-pod agent (``nwb-agent``): runs a package's stages with ansible-runner on the host."""
