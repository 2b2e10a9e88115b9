"""The Python frontend that builds VM IR from ordinary Python, and the reference
interpreter that runs it on numpy. (Built by the IR issue; nothing lives here yet.)"""
