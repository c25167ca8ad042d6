import threading

from mqcore.services.result import StepResult
from mqcore.services.runner import ServiceLoop, run_lease


def test_loop_survives_errors_and_is_woken_without_polling() -> None:
    calls: list[int] = []
    second_call = threading.Event()
    third_call = threading.Event()

    def step() -> StepResult:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("disk hiccup")
        (second_call if len(calls) == 2 else third_call).set()
        return StepResult("probe", progressed=False)

    wake = threading.Event()
    # An hour between idle runs: a third call within seconds can only come from the wake.
    loop = ServiceLoop("probe", step, interval_s=3600, wake=wake)
    loop.start()
    try:
        assert second_call.wait(5), "the loop did not retry after the error"
        assert not third_call.is_set()
        wake.set()
        assert third_call.wait(5), "the wake event did not cut the idle wait short"
    finally:
        loop.stop()
    assert not loop.alive
    assert loop.state.errors == 1
    assert loop.state.last_error == "RuntimeError: disk hiccup"
    assert loop.state.runs == 2


def test_wake_method_cuts_the_wait_short() -> None:
    called = threading.Event()
    runs: list[int] = []

    def step() -> StepResult:
        runs.append(1)
        if len(runs) == 2:
            called.set()
        return StepResult("probe", progressed=False)

    loop = ServiceLoop("probe", step, interval_s=3600)
    loop.start()
    try:
        loop.wake()
        assert called.wait(5)
    finally:
        loop.stop()


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def test_lease_runs_busy_steps_back_to_back_and_backs_off_when_idle() -> None:
    time = FakeTime()
    script = [True] * 3 + [False] * 1000
    results: list[StepResult] = []

    def step() -> StepResult:
        time.now += 0.0001
        return StepResult("reput", progressed=script.pop(0) if script else False)

    last = run_lease(
        step,
        duration_s=2.0,
        poll_s=0.001,
        max_idle_s=0.004,
        monotonic=time.monotonic,
        sleep=time.sleep,
        on_result=results.append,
    )
    assert last is not None and not last.progressed
    assert all(r.service == "reput" for r in results)
    assert time.sleeps[:256] == [0.001] * 256  # no sleep between the three busy steps
    assert time.sleeps[256:512] == [0.002] * 256
    assert max(time.sleeps) == 0.004  # capped
    assert time.now >= 2.0


def test_lease_ends_when_skipped_or_stopped() -> None:
    time = FakeTime()
    skipped = StepResult("reput", False, status="skipped")
    calls: list[int] = []

    def step() -> StepResult:
        calls.append(1)
        return skipped

    assert (
        run_lease(
            step,
            duration_s=60,
            poll_s=0.001,
            max_idle_s=0.01,
            monotonic=time.monotonic,
            sleep=time.sleep,
        )
        is skipped
    )
    assert calls == [1]
    assert (
        run_lease(step, duration_s=60, poll_s=0.001, max_idle_s=0.01, should_stop=lambda: True)
        is None
    )
