"""Testing a handler with scrinalia_workers.testing: a scheduled period fails, its retry
comes due without waiting, and succeeds."""

from scrinalia_workers.testing import TestDatabase

attempts = []


def ocr(run):
    attempts.append(run["attempt"])
    if run["attempt"] == 1:
        raise ConnectionError("the OCR service is down")
    return "3 pages"


def test_a_failed_period_is_retried_and_succeeds():
    with TestDatabase() as db:
        db.register("ocr")
        db.schedule("ocr", "0 2 * * *", timezone="Europe/Berlin")
        db.tick()  # arms the schedule: its next 02:00
        db.make_due("ocr")  # that 02:00 has come
        assert db.tick()  # the scheduler enqueues the period

        first = db.run_one({"ocr": ocr})  # claimed, run and finished by the runner
        assert first["status"] == "FAILED" and first["retry_pending"]
        assert "the OCR service is down" in first["error"]

        db.tick()  # creates the retry, held back by its backoff
        assert db.run_one({"ocr": ocr}) is None  # not claimable yet
        db.make_retry_due("ocr")  # the backoff has passed
        second = db.run_one({"ocr": ocr})
        assert second["status"] == "SUCCEEDED" and second["attempt"] == 2
        assert second["retry_of"] == first["run_id"]
        assert attempts == [1, 2]
