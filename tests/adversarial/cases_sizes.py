"""Sizes that cannot run: refused up front with the limit named (the pool, tokens per batch, sequences per
batch, the context, CP degrees with less than a token per rank, distribution parameters), and numbers past
int64 on the command line are a range error."""

from __future__ import annotations

from tests.adversarial.corpus import Case

INT64 = "outside the int64 range"


def compare(name: str, *args: str, expect: str, sub: bool = False) -> Case:
    """``sub``: argparse refuses the value (it exits), so the row runs as a process."""
    return Case(f"sizes-{name}", ("compare", *args, "--iterations", "1", "--policies", "static-cp"), expect,
                subprocess=sub)


def cost(name: str, *args: str, expect: str, sub: bool = False) -> Case:
    return Case(f"sizes-{name}", ("cost", "--model", "llama3-8b", *args), expect, subprocess=sub)


CASES = [
    compare("pool-1e5", "--pool", "100000", expect="job.pool = 100000 is invalid: at most 16,384"),
    compare("pool-int64", "--pool", "99999999999999999999", expect=INT64, sub=True),
    compare("tokens-1e12", "--global-batch-tokens", "1000000000000", expect="over the limit of 262,144 (2^18)"),
    compare("tokens-1e15", "--global-batch-tokens", "1000000000000000",
            expect="job.global_batch_tokens = 1000000000000000 is invalid: at most 1,099,511,627,776"),
    compare("context-1", "--context-len", "1", expect="over the limit of 16,777,216 (2^24)"),
    compare("context-int64", "--context-len", "9223372036854775807",
            expect="job.context_len = 9223372036854775807 is invalid: at most 1,099,511,627,776"),
    compare("context-past-int64", "--context-len", "9223372036854775808", expect=INT64, sub=True),
    compare("seqs-1e6", "--global-batch-seqs", "1000000", expect="1,000,000 sequences (global_batch_seqs), over "
            "the limit of 262,144"),
    compare("lognormal-mu", "--trace", "lognormal:mu=1000,sigma=1", expect="parameter 'mu' = 1000 is invalid"),
    compare("lognormal-sigma", "--trace", "lognormal:mean=1024,sigma=40", expect="parameter 'sigma' = 40 is "
            "invalid"),
    Case("sizes-option-int64", ("compare", "--iterations", "1", "--policies",
                                "static-cp:cp_degree=99999999999999999999"), INT64),
    compare("iterations-int64", "--iterations", "99999999999999999999", expect=INT64, sub=True),
    cost("cp-1e6", "--seq-len", "32768", "--cp", "1000000", expect="--cp 1,000,000 over --seq-len 32,768 leaves "
         "0.033 tokens per rank"),
    cost("cp-over-len", "--seq-len", "1024", "--cp", "2048", expect="leaves 0.5 tokens per rank"),
    cost("seq-len-int64", "--seq-len", "99999999999999999999", expect=INT64, sub=True),
    cost("seq-len-2e40", "--seq-len", str(2**41), expect="job.context_len = 2199023255552 is invalid: at most"),
    Case("sizes-model-1e9-layers", ("model", "big.toml"), "model.layers = 1000000000 is invalid: at most 10,000",
         files={"big.toml": "hidden = 1024\nffn = 4096\nlayers = 1000000000\nheads = 8\nvocab = 1000\n"}),
]
