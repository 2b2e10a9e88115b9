"""Small programs a new user reads first. (Added with the VM frontend.)"""
