"""The sandbox: a real control plane on loopback with simulated nodes (see ARCHITECTURE.md §7)."""
