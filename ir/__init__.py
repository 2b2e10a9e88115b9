"""The VM IR: scalar expressions, tensors in three memory spaces, the instruction set,
structured statements and programs; a stable text form (printer and parser), a
builder, and the verifier.

    from tilevm.ir import Builder, format_program, parse_program, verify

docs/ir.md is the reference: every instruction, the text grammar, the verifier's rules.
"""

from tilevm.ir import expr, instructions
from tilevm.ir.builder import Builder
from tilevm.ir.errors import SourceLoc, VMError
from tilevm.ir.expr import BlockIndex, Const, Expr, Var, format_expr
from tilevm.ir.expr_parser import ParseError, parse_expr
from tilevm.ir.instructions import INSTRUCTIONS, Instruction
from tilevm.ir.parser import parse_program
from tilevm.ir.printer import format_instruction, format_program
from tilevm.ir.stmt import AssignVar, For, If, Let, Program, Seq
from tilevm.ir.types import MemorySpace, Pointer, PointerType, Tensor, TensorType
from tilevm.ir.verifier import verify

__all__ = [
    "expr", "instructions", "Builder", "SourceLoc", "VMError", "BlockIndex", "Const", "Expr",
    "Var", "INSTRUCTIONS", "Instruction", "ParseError", "parse_expr", "parse_program",
    "format_expr", "format_instruction", "format_program", "AssignVar", "For", "If", "Let",
    "Program", "Seq", "MemorySpace", "Pointer", "PointerType", "Tensor", "TensorType",
    "verify",
]
