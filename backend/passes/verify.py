"""Pass `verify`: the program obeys every rule of the VM (`tilevm.ir.verifier`).

Expects: any program. Guarantees: the program is unchanged and valid, or a `VMError`
naming the rule, the instruction and the user's line was raised.
"""

from __future__ import annotations

from tilevm.backend.passes.context import DEFAULT_CONTEXT, PassContext
from tilevm.ir.stmt import Program
from tilevm.ir.verifier import verify as verify_program


def verify(program: Program, context: PassContext = DEFAULT_CONTEXT) -> Program:
    verify_program(program)
    return program
