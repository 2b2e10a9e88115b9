"""The VM IR: types, tensors in three memory spaces, instructions, statements, a text
printer and parser, and a verifier. (Built by the IR issue; nothing lives here yet.)"""
