"""The HLO audit on hand-written modules, and the premise of its loop count on this
runtime."""

import pytest

from odestudy import count_collectives
from odestudy.measure.audit import loop_collective_arrays

HLO = """HloModule m

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}

%body (p: (s32[], f32[4])) -> (s32[], f32[4]) {
  %p = (s32[], f32[4]{0}) parameter(0)
  %x = f32[4]{0} get-tuple-element(%p), index=1
  %r = f32[4]{0} all-reduce(f32[4]{0} %x), replica_groups={}, to_apply=%add
  %i = s32[] get-tuple-element(%p), index=0
  ROOT %t = (s32[], f32[4]{0}) tuple(s32[] %i, f32[4]{0} %r)
}

%cond (p: (s32[], f32[4])) -> pred[] {
  %p = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %g = s32[] all-reduce(s32[] %i), replica_groups={}, to_apply=%add
  %c = s32[] constant(10)
  ROOT %lt = pred[] compare(s32[] %g, s32[] %c), direction=LT
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %z = s32[] constant(0)
  %init = (s32[], f32[4]{0}) tuple(s32[] %z, f32[4]{0} %x)
  %w = (s32[], f32[4]{0}) while((s32[], f32[4]{0}) %init), condition=%cond, body=%body
  %y = f32[4]{0} get-tuple-element(%w), index=1
  ROOT %out = f32[4,2]{1,0} all-gather(f32[4]{0} %y), dimensions={0}
}
"""


def test_counts_collectives_inside_and_outside_loops():
    audit = count_collectives(HLO)
    assert audit.while_loops == 1
    assert audit.total == 3
    assert audit.in_loops == 2
    assert audit.by_kind == {"all-reduce": 2, "all-gather": 1}
    assert audit.in_loops_by_kind == {"all-reduce": 2}
    assert audit.bytes_in_loops == 4 * 4 + 4
    assert audit.bytes_total == 4 * 4 + 4 + 8 * 4


def test_no_collectives():
    audit = count_collectives(
        "HloModule m\n\nENTRY %main () -> f32[] {\n  ROOT %c = f32[] constant(1)\n}\n"
    )
    assert audit.total == 0 and audit.in_loops == 0 and audit.while_loops == 0


def test_loop_collectives_name_the_arrays_they_carry():
    one = "%r = f32[4]{0} all-reduce(f32[4]{0} %x), replica_groups={}, to_apply=%add"
    three = (
        "%rt = (f32[4]{0}, f32[4]{0}, s32[]) all-reduce(f32[4]{0} %x, f32[4]{0} %x, s32[] %i),"
        " replica_groups={}, to_apply=%add\n  %r = f32[4]{0} get-tuple-element(%rt), index=0"
    )
    # An all-reduce meets once per array; the all-gather after the loop is not in a loop.
    assert loop_collective_arrays(HLO) == {"g": 1, "r": 1}
    assert loop_collective_arrays(HLO.replace(one, three)) == {"g": 1, "rt": 3}
    to_all = three.replace(") all-reduce(", ") all-to-all(").replace(", to_apply=%add", "")
    assert loop_collective_arrays(HLO.replace(one, to_all)) == {"g": 1, "rt": 1}


def test_the_cpu_runtime_meets_once_per_array_of_a_loop_all_reduce():
    """The premise of `predict`'s loop term (model 11), checked on this runtime: a
    profile of one call counts one rendezvous per array of an all-reduce's tuple."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from odestudy.measure.compat import make_data_mesh, shard_map
    from odestudy.measure.loops import event_counts

    def body(i_xs):
        i, xs = i_xs
        return i + 1, jax.lax.psum(tuple(x * 0.5 for x in xs), "data")

    def loop(a, b, c):
        return jax.lax.while_loop(lambda i_xs: i_xs[0] < 5, body, (0, (a, b, c)))[1]

    mesh = make_data_mesh(jax.devices("cpu")[:2])
    f = jax.jit(shard_map(loop, mesh, (P("data"),) * 3, (P("data"),) * 3))
    arrays = (jnp.ones((4, 3)), jnp.ones((2,)), jnp.ones((6, 1)))
    compiled = f.lower(*arrays).compile()
    meetings = loop_collective_arrays(compiled.as_text())
    counts = event_counts(compiled, *arrays)
    if "Rendezvous" not in counts:
        pytest.skip("this runtime's profile names no rendezvous")
    assert sum(meetings.values()) > 1  # a tuple, not one array
    assert counts["Rendezvous"] == sum(counts[n] * k for n, k in meetings.items())


def test_the_meeting_benchmark_meets_as_often_as_it_divides_by():
    """`meeting.loop_meeting` divides by `iterations * arrays`: its loop all-reduces that
    many arrays per iteration, and the loop it is timed against none."""
    from odestudy.measure.meeting import _loop

    meets, _ = _loop(2, 5, 10, True)
    alone, _ = _loop(2, 5, 10, False)
    assert sum(loop_collective_arrays(meets.as_text()).values()) == 5
    assert loop_collective_arrays(alone.as_text()) == {}
