"""Replay agentfootprint's context-window strategies over recorded runs."""

from contextledger.read.messages import Message, ModelCall, RunMessages, rebuild_messages
from contextledger.window.policies import Policy, PolicySpecError, parse_policy, policy_from_config
from contextledger.window.replay import Replay, Visit, replay, window_visit

__all__ = [
    "Message",
    "ModelCall",
    "Policy",
    "PolicySpecError",
    "Replay",
    "RunMessages",
    "Visit",
    "parse_policy",
    "policy_from_config",
    "rebuild_messages",
    "replay",
    "window_visit",
]
