"""Adapters for agent frameworks: `openai_agents` (the OpenAI Agents SDK) and `pydantic_ai`."""
