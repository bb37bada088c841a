"""torchrun entry for the fault tests: ``gmp train`` in which rank FAULT_RANK hangs or dies at
step FAULT_STEP (GMP_TEST_FAULT = "hang" | "die") or gets SIGTERM there (``"term"``), or cannot
write its part of the FAULT_STEP-th checkpoint (``"save"``: permission denied), or is started
with ``--lr 0.05`` added (``"flags"``);
everything else is the real CLI. ``TERM_RANK_0=1``: when the run fails, rank 0 gets SIGTERM (as
from torchrun, which terminates the others as soon as one rank exits; late, on a loaded machine)
before the run closes (its trainer, lock and process group), and again after, before the error
line is printed."""

from __future__ import annotations

import os
import signal
import sys
import time

from gmp.train.trainer import Trainer


def main() -> None:
    fault = os.environ["GMP_TEST_FAULT"]
    rank, bad, at = int(os.environ["RANK"]), int(os.environ["FAULT_RANK"]), int(os.environ["FAULT_STEP"])
    real = Trainer.train_step

    def faulty(self, step):
        if fault == "term" and rank == bad and step.index == at:
            os.kill(os.getpid(), signal.SIGTERM)  # as torchrun's, on Ctrl-C: the ranks stop together, checkpointed
        if fault in ("hang", "die") and rank == bad and step.index == at:
            if fault == "die":
                os._exit(1)
            # hung (as kill -STOP): the peers' collective times out. torchrun then stops this rank with
            # SIGTERM, which the trainer turns into a stop request (kept until the step ends): left at
            # that, the sleep outlasts torchrun's 30 s grace period before its SIGKILL. A hung process
            # is gone after either signal, so here SIGTERM ends it at once.
            signal.signal(signal.SIGTERM, lambda *_: os._exit(1))
            time.sleep(120)
        return real(self, step)

    Trainer.train_step = faulty
    if os.environ.get("TERM_RANK_0") and rank == 0:
        import gmp.train.run as run

        real_close = run.close_run

        def terminate_if(failed):
            if failed:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.2)

        def close_and_terminate(*args, failed, **kwargs):
            terminate_if(failed)
            real_close(*args, failed=failed, **kwargs)
            terminate_if(failed)

        run.close_run = close_and_terminate
    if fault == "save" and rank == bad:
        import errno

        import gmp.train.checkpoint as ck

        real_write, saves = ck.write_primary_rows, []

        def failing_write(store, path):
            saves.append(path)
            if len(saves) == at:
                raise PermissionError(errno.EACCES, "Permission denied", str(path))
            return real_write(store, path)

        ck.write_primary_rows = failing_write
    from cli.main import main as gmp_main

    extra = ["--lr", "0.05"] if fault == "flags" and rank == bad else []
    sys.argv = ["gmp", "train", *sys.argv[1:], *extra]
    gmp_main()


if __name__ == "__main__":
    main()
