"""The sandbox's kubelet tier: real kubelet and containerd nodes in isolated node roots.

``tier.KubeletTier`` runs them on the sandbox control plane (``nwb sandbox up --mode kubelet``);
``realnode.RealNode`` is one node; ``nodeconfig`` renders its files; ``netns`` carries traffic
between this machine's loopback and a node's own network namespace; ``tierbins`` finds and builds
the binaries. docs/architecture.md, "The kubelet tier", has the design.
"""
