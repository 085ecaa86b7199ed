"""The Python tool's loader: the sandboxed interpreter waits here for the host's go, then runs
``main.py`` as ``python -I main.py`` would.

``PythonTool`` starts ``python -I -c <this source>`` inside the sandbox ahead of need (a pooled
sandbox), so that a call pays neither for bwrap nor for the interpreter's start. It waits only
where no other call can reach it: in its own PID namespace under bwrap, or as the host's own user
at the rlimits level (a root host's shared ``nobody`` never waits as a process: the supervisor
then forks at the go). Its stdin is a pipe the supervisor holds: when the supervisor closes it
(the go), the host has written ``main.py``; the loader runs ``main.py`` in ``__main__`` with
``sys.argv == ["main.py"]``, ``__file__`` set, and tracebacks that show only the code's own
frames. stdin is then at end of file, as ``/dev/null``
would be. Nothing of the loader stays in ``__main__``.

Standard library only: it must run on the bare interpreter.
"""


def _lmgym_loader():
    import os
    import sys

    if sys.argv[1:] == ["ready"]:
        os.write(1, b"r")  # up and waiting (the host reads this byte before the call's output)
    while os.read(0, 4096):  # the go: the supervisor closes the pipe
        pass

    def hook(kind, value, tb):
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next  # the loader's own frames
        sys.__excepthook__(kind, value.with_traceback(tb), tb)

    sys.excepthook = hook
    sys.argv[:] = ["main.py"]
    path = os.path.join(os.getcwd(), "main.py")
    main = sys.modules["__main__"].__dict__
    del main["_lmgym_loader"]
    main.update(__file__=path, __doc__=None, __cached__=None)
    with open(path, "rb") as f:
        source = f.read()
    exec(compile(source, path, "exec", dont_inherit=True), main)


if __name__ == "__main__":  # python -c runs it as __main__; importing it (doctests) runs nothing
    _lmgym_loader()
