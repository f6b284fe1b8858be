"""mechscope: causal and attributional analysis of transformer language models."""
