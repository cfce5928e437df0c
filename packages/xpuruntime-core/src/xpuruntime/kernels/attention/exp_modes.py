"""How the Gluon Hopper forward's softmax computes its exponentials (the kernel's
``EXP_MODE``): plain data shared by the host side (:mod:`.hopper`, whose variants name a
mode) and the kernel (:mod:`._hopper_kernels`, which compiles it), so that neither imports
the other for it."""

#: Every exponential on the special-function unit.
SFU = 0
#: One exponential in four by a polynomial on the FMA pipe (the variant flag ``e4``).
POLY4 = 1
#: No exponential: fp8 P from a half's bits (the variant flag ``b``).
HALF_BITS = 2
