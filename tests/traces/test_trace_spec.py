"""Length distributions from text (traces.spec) and batches by sequence count."""

from __future__ import annotations

import math
from functools import partial

import numpy as np
import pytest

from dcpsim.traces import TraceError, form_batches, lognormal, lognormal_pareto, mixture, sample_batches
from dcpsim.traces.spec import UNBOUNDED, is_distribution_spec, parse_distribution, resolve_length_source


def test_lognormal_spec_is_the_generator_with_mu_from_the_mean():
    p = parse_distribution("lognormal:mean=1024,sigma=1.5,min=128,max=8192")
    assert p.context_len == 8192
    mu = math.log(1024) - 1.5**2 / 2  # E[L] = e^(mu + sigma²/2)
    np.testing.assert_array_equal(p.sample(5000, 7), lognormal(5000, mu, 1.5, 7, min_len=128, max_len=8192))


def test_median_mu_and_suffixes():
    a = parse_distribution("lognormal:median=4K,sigma=0.5").sample(1000, 1)
    b = lognormal(1000, math.log(4096), 0.5, 1, max_len=UNBOUNDED)
    np.testing.assert_array_equal(a, b)
    c = parse_distribution(f"lognormal:mu={math.log(4096)!r},sigma=0.5").sample(1000, 1)
    np.testing.assert_array_equal(a, c)
    # The sample median of a lognormal is e^mu: within 5% for 20,000 draws.
    big = parse_distribution("lognormal:median=4K,sigma=0.5").sample(20000, 3)
    assert np.median(big) == pytest.approx(4096, rel=0.05)


def test_pareto_spec_is_the_body_plus_tail_generator():
    p = parse_distribution("pareto:median=2048,sigma=1,tail_start=64K,alpha=1.5,tail_frac=0.1,max=1M")
    expect = lognormal_pareto(3000, math.log(2048), 1.0, 65536, 1.5, 0.1, 5, max_len=1 << 20)
    np.testing.assert_array_equal(p.sample(3000, 5), expect)


def test_mixture_spec_is_the_mixture_of_its_components():
    text = "mix:3*lognormal:median=1024,sigma=1,max=32K+1*32k"
    comps = [resolve_length_source("lognormal:median=1024,sigma=1,max=32K"), resolve_length_source("32k")]
    expect = mixture([partial(c.sample) for c in comps], [3, 1], 4000, 11)
    np.testing.assert_array_equal(parse_distribution(text).sample(4000, 11), expect)
    assert parse_distribution(text).context_len == 32768


def test_deterministic_in_the_seed_through_sample_batches():
    spec = "lognormal:mean=2048,sigma=1.2,max=65536"
    a = sample_batches(parse_distribution(spec), 2, 1 << 18, context_len=65536, seed=4)
    b = sample_batches(parse_distribution(spec), 2, 1 << 18, context_len=65536, seed=4)
    c = sample_batches(parse_distribution(spec), 2, 1 << 18, context_len=65536, seed=5)
    assert a == b and a != c


def test_what_counts_as_a_spec(tmp_path):
    assert is_distribution_spec("lognormal:sigma=1") and is_distribution_spec("gamma:k=2.5")
    assert not is_distribution_spec("256k") and not is_distribution_spec("lengths.csv")
    weird = tmp_path / "a:b.csv"
    weird.write_text("length\n5\n")
    assert not is_distribution_spec(str(weird))  # an existing file is a file


@pytest.mark.parametrize(
    "text, needle",
    [
        ("gamma:shape=2", "unknown distribution 'gamma'; valid: lognormal, pareto, mix"),
        (
            "lognormal:mean=1024,sigm=1.5",
            "unknown parameter 'sigm'; valid: mean, median, mu, sigma, min, max",
        ),
        ("lognormal:mean=1024", "parameter 'sigma' is missing"),
        ("lognormal:mean=1024,median=10,sigma=1", "exactly one of mean, median, mu"),
        ("lognormal:mean=abc,sigma=1", "'mean' = 'abc' is not a number"),
        ("lognormal:mean=1024,sigma=1,min=9000,max=8192", "min = 9000 is above max = 8192"),
        ("lognormal:mean=1024,sigma=-1", "'sigma' = -1 is invalid"),
        ("lognormal:mean=-5,sigma=1", "'mean' = -5 is invalid"),
        ("lognormal:mean=1024,sigma=1,min=0.5", "'min' = 0.5 is invalid"),
        ("lognormal:mean=1024,sigma=1,sigma=2", "'sigma' is given twice"),
        ("lognormal:mean", "'mean' is not key=value"),
        ("pareto:median=1024,sigma=1,tail_start=1K,alpha=0,tail_frac=0.1", "'alpha' = 0 is invalid"),
        ("pareto:median=1024,sigma=1,tail_start=1K,alpha=1,tail_frac=2", "'tail_frac' = 2 is invalid"),
        ("mix:0*32k+0*256k", "the weights sum to 0"),
        ("mix:lognormal:median=1,sigma=1", "has no weight"),
        ("mix:1*nosuchpreset", "unknown trace preset 'nosuchpreset'"),
    ],
)
def test_bad_specs_are_one_clear_line(text, needle):
    with pytest.raises(TraceError) as e:
        resolve_length_source(text)
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_form_batches_by_sequence_count():
    lengths = np.array([5, 300, 7, 9, 1, 2, 3, 4, 8, 6])
    bs = form_batches(lengths, None, context_len=100, global_batch_seqs=3)
    # 300 is cut into 100, 100, 100: 12 pieces -> 4 batches of 3 (the token budget plays no part).
    assert [b.num_seqs for b in bs] == [3, 3, 3, 3]
    np.testing.assert_array_equal(bs[0].lengths, [5, 100, 100])
    np.testing.assert_array_equal(np.concatenate([b.seq_ids for b in bs]), np.arange(12))
    assert [b.num_seqs for b in form_batches(lengths[:7], 1, 100, global_batch_seqs=4)] == [4, 4, 1]
    assert len(form_batches(lengths, None, 100, steps=2, global_batch_seqs=5)) == 2
    with pytest.raises(TraceError, match="'global_batch_seqs' = 0"):
        form_batches(lengths, None, 100, global_batch_seqs=0)


def test_sample_batches_by_sequence_count():
    bs = sample_batches("32k", 3, 1, seed=2, global_batch_seqs=50)
    assert [b.num_seqs for b in bs] == [50, 50, 50]
    np.testing.assert_array_equal(np.concatenate([b.seq_ids for b in bs]), np.arange(150))
    assert bs == sample_batches("32k", 3, 1, seed=2, global_batch_seqs=50)


def test_a_trace_file_as_a_mixture_component(tmp_path):
    f = tmp_path / "l.csv"
    f.write_text("length\n100\n200\n300\n")
    p = parse_distribution(f"mix:1*{f}+1*lognormal:median=64K,sigma=0.1,min=60000,max=70000")
    out = p.sample(2000, 3)
    short = out[out < 1000]
    assert set(short.tolist()) == {100, 200, 300} and 0.4 < short.size / out.size < 0.6
    assert p.context_len == 70000
    with pytest.raises(TraceError, match="missing.csv"):
        parse_distribution("mix:1*missing.csv")
