"""Ansible side: turn roles into NodeWright packages and run them on a node with ansible-runner."""
