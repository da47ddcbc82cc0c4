"""Fabric designer: fat-tree and rail-optimised Clos sizing, bill of materials, topology checks (no torch)."""
