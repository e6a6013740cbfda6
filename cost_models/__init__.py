"""cost_models package."""
