"""Run in circuit-tracer's own environment (``MECHSCOPE_CTRACER_PYTHON``), offline.

``make MODEL_DIR``: a tiny random Qwen 3 (``Qwen3ForCausalLM``) built from its config by
that environment's transformers and saved beside the tokenizer files already in
``MODEL_DIR``, so both sides load the same weights. (Not Gemma 3: circuit-tracer's nnsight
backend, its only way to a Gemma 3 that is not an official checkpoint, imports
``nnsight.intervention.tracing``, which nnsight 0.8 no longer has; TransformerLens builds
Gemma 3 configs from official names only, Qwen 3 from any config.)

``attribute MODEL_DIR TC_DIR ARGS_JSON OUT``: circuit-tracer's graph of the prompt's ids
with the transcoder set of ``TC_DIR`` (``layer_i.safetensors`` + ``config.yaml``), its
pruning and its scores, saved with ``torch.save`` to ``OUT``, and its graph file as
circuit-tracer's ``create_graph_files`` writes it, in the folder ``OUT`` without suffix.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch


def make(model_dir: Path) -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    ids = json.loads((model_dir / "special_ids.json").read_text())
    config = Qwen3Config(
        vocab_size=ids["vocab_size"],
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        initializer_range=0.2,
        bos_token_id=ids["bos"],
        eos_token_id=ids["eos"],
        pad_token_id=ids["pad"],
        tie_word_embeddings=False,
    )
    config.architectures = ["Qwen3ForCausalLM"]
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():  # norm weights away from their init of ones, so each norm matters
        for name, p in model.named_parameters():
            if "norm" in name:
                p.normal_(1.0, 0.3)
    model.save_pretrained(model_dir)
    print(json.dumps({"saved": str(model_dir)}))


def attribute(model_dir: Path, tc_dir: Path, args: dict, out: Path) -> None:
    import yaml
    from circuit_tracer import attribute as ct_attribute
    from circuit_tracer.graph import compute_graph_scores, prune_graph
    from circuit_tracer.replacement_model.replacement_model_transformerlens import (
        TransformerLensReplacementModel,
    )
    from circuit_tracer.transcoder.single_layer_transcoder import load_transcoder_set
    from circuit_tracer.utils.create_graph_files import create_graph_files
    from transformer_lens import loading_from_pretrained as loading
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = yaml.safe_load((tc_dir / "config.yaml").read_text())
    paths = {i: str(tc_dir / name) for i, name in enumerate(cfg["transcoders"])}
    transcoders = load_transcoder_set(
        paths, scan="tiny-qwen3", feature_input_hook=cfg["feature_input_hook"],
        feature_output_hook=cfg["feature_output_hook"], device=torch.device("cpu"),
        lazy_encoder=False, lazy_decoder=False,
    )  # fmt: skip
    # TransformerLens's from_pretrained takes official names only: its own steps, on the
    # local folder (config, converted weights, no folding, as circuit-tracer asks for)
    cfg = loading.get_pretrained_model_config(
        str(model_dir), fold_ln=False, device="cpu", dtype=torch.float32
    )
    hf_model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    state_dict = loading.get_pretrained_state_dict(
        str(model_dir), cfg, hf_model, dtype=torch.float32
    )
    model = TransformerLensReplacementModel(cfg, AutoTokenizer.from_pretrained(model_dir))
    model.load_and_process_state_dict(
        state_dict, fold_ln=False, center_writing_weights=False, center_unembed=False
    )
    model._configure_replacement_model(transcoders)
    ids = torch.tensor(args["ids"])
    graph = ct_attribute(
        ids, model, max_n_logits=args["max_n_logits"],
        desired_logit_prob=args["desired_logit_prob"], batch_size=args["batch_size"],
        max_feature_nodes=args["max_feature_nodes"],
    )  # fmt: skip
    node_mask, edge_mask, cumulative = prune_graph(
        graph, args["node_threshold"], args["edge_threshold"]
    )
    replacement, completeness = compute_graph_scores(graph)
    create_graph_files(
        graph, slug="parity", output_path=str(out.with_suffix("")), scan="tiny-qwen3",
        node_threshold=args["node_threshold"], edge_threshold=args["edge_threshold"],
    )  # fmt: skip
    torch.save(
        {
            "adjacency": graph.adjacency_matrix.cpu(),
            "active_features": graph.active_features.cpu(),
            "selected_features": graph.selected_features.cpu(),
            "activation_values": graph.activation_values.cpu(),
            "logit_ids": torch.tensor([t.vocab_idx for t in graph.logit_targets]),
            "logit_probs": graph.logit_probabilities.cpu(),
            "input_tokens": graph.input_tokens.cpu(),
            "node_mask": node_mask.cpu(),
            "edge_mask": edge_mask.cpu(),
            "cumulative": cumulative.cpu(),
            "scores": torch.tensor([replacement, completeness], dtype=torch.float64),
        },
        out,
    )
    print(json.dumps({"saved": str(out), "n_nodes": int(graph.adjacency_matrix.shape[0])}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(Path(sys.argv[2]))
    else:
        attribute(
            Path(sys.argv[2]), Path(sys.argv[3]), json.loads(Path(sys.argv[4]).read_text()),
            Path(sys.argv[5]),
        )  # fmt: skip
