import threading

from mqcore.services.result import StepResult
from mqcore.services.runner import ServiceLoop


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
