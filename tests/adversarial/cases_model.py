"""Model files (``--model FILE.json|FILE.toml|FOLDER``, ``dcpsim model``): Hugging Face config.json and model
TOML fields are checked for type and range (integers within int64, sizes within the caps of
cost_models.specs); the file is a regular UTF-8 file of bounded nesting."""

from __future__ import annotations

import json

from tests.adversarial.corpus import DIRECTORY, FIFO, Case

LLAMA = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
         "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256}
TOML = "hidden = 1024\nffn = 4096\nlayers = 4\nheads = 8\nvocab = 1000\n"


def hf(name: str, changes: dict, expect: str) -> Case:
    return model(name, json.dumps({**LLAMA, **changes}), expect)


def model(name: str, content: object, expect: str, *, sub: bool = False, codes: tuple[int, ...] = (2,)) -> Case:
    return Case(f"model-{name}", ("model", name), expect, files={name: content}, subprocess=sub, codes=codes)


CASES = [
    hf("nested_arch.json", {"model_type": None, "architectures": [["LlamaForCausalLM"]]},
       "no 'model_type' and no known 'architectures' entry ([['LlamaForCausalLM']])"),
    hf("model_type_table.json", {"model_type": {"a": 1}}, "model_type = {'a': 1} is not supported"),
    hf("window_string.json", {"sliding_window": "4096", "use_sliding_window": True},
       "field 'sliding_window' = '4096' is invalid: expected an integer ≥ 1"),
    hf("window_flag.json", {"sliding_window": 4096, "use_sliding_window": "yes"},
       "field 'use_sliding_window' = 'yes' is invalid; expected true or false"),
    hf("layers_1e9.json", {"num_hidden_layers": 10**9}, "model.layers = 1000000000 is invalid: at most 10,000"),
    hf("hidden_int64.json", {"hidden_size": 10**23}, "field 'hidden_size' = 100000000000000000000000 is "
       "invalid: expected an integer ≥ 1 (outside the int64 range"),
    hf("vocab_huge.json", {"vocab_size": 2**40}, "model.vocab = 1099511627776 is invalid: at most 16,777,216"),
    hf("heads_float.json", {"num_attention_heads": 32.0}, "field 'num_attention_heads' = 32.0 is invalid"),
    hf("heads_zero.json", {"num_attention_heads": 0}, "field 'num_attention_heads' = 0 is invalid"),
    hf("ffn_string.json", {"intermediate_size": "14336"}, "field 'intermediate_size' = '14336' is invalid"),
    model("list.json", "[1, 2]", "a config.json must hold one JSON object, got list"),
    model("nan.json", '{"model_type": "llama", "hidden_size": NaN}', "NaN is not a JSON number"),
    model("syntax.json", '{"model_type": ', "not valid JSON"),
    model("latin1.json", b'{"model_type": "\xe9"}', "byte b'\\xe9' is not UTF-8"),
    model("deep.json", "[" * 5000 + "]" * 5000, "nested 5000 levels deep, over the limit of 64"),
    model("deep.toml", "a = " + "[" * 3000 + "]" * 3000 + "\n", "nested too deeply"),
    model("dir.json", DIRECTORY, "is a directory, not a regular file; expected a model file"),
    model("pipe.json", FIFO, "is a FIFO (named pipe), not a regular file", sub=True),
    model("pipe.toml", FIFO, "is a FIFO (named pipe), not a regular file", sub=True),
    model("float.toml", TOML.replace("vocab = 1000", "vocab = 1e3"), "field 'vocab' = 1000.0 is invalid: "
          "expected an integer"),
    model("int64.toml", TOML.replace("vocab = 1000", "vocab = 100000000000000000000"),
          "outside the int64 range"),
    model("layers.toml", TOML.replace("layers = 4", "layers = 1000000000"), "model.layers = 1000000000 is "
          "invalid: at most 10,000"),
    model("typo.toml", TOML + "hiden = 1\n", "unknown key 'hiden'; valid keys"),
    Case("model-folder-without-config", ("model", "hf"), "hf: the folder holds no config.json",
         files={"hf/readme.txt": "weights elsewhere\n"}),
]
