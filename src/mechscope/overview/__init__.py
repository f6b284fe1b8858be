"""Model overview: a logit-lens pass over a few prompts, the first part of every demo."""
