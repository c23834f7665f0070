"""The Anthropic Messages API as this agent's provider (`"provider": "anthropic"`).

bantam's own Anthropic client does the translation; this file is the agent's to change, e.g.
to add headers or switch models by time of day. It reads api_key and model from config.json
like the default provider.
"""
from bantam.providers.anthropic import AnthropicProvider


def make_provider(cfg):
    return AnthropicProvider(cfg)
