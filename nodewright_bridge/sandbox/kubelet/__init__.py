"""The sandbox's simulated kubelet: one Python process serving many simulated nodes."""
