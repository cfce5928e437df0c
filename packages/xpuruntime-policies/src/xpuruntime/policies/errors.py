"""Exception roots shared by every xpuruntime distribution.

The root lives here, in the lightest distribution, so that `except XpuRuntimeError`
catches policy, runtime, engine and training errors alike without importing native code.
"""

from __future__ import annotations


class XpuRuntimeError(Exception):
    """Base class of every error xpuruntime raises on purpose."""


class PolicyError(XpuRuntimeError, ValueError):
    """A policy document or policy object is invalid; the message says how to fix it."""
