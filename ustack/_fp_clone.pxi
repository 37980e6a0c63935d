# Copies of slotted objects in one C call (connection setup: ``transport/tcp/prototype.py``).
#
# A fresh TCP connection is a dozen slotted objects whose ~200 fields are,
# all but a few, the same for every connection made from one configuration:
# set one by one by their ``__init__`` they cost more than the rest of the
# handshake. ``SlotCopier(cls).clone(proto)`` makes a new instance of ``cls``
# whose object slots (its bases' too) hold what ``proto``'s hold (a shallow
# copy: the references are shared), without running ``__init__``; the caller
# then gives the copy fresh versions of whatever must not be shared.

from libc.stdlib cimport malloc, free
from cpython.ref cimport Py_XINCREF

cdef extern from "Python.h":
    ctypedef struct _CloneType "PyTypeObject":
        PyObject *(*tp_alloc)(_CloneType *, Py_ssize_t)


cdef class SlotCopier:
    """Shallow copies of instances of one slotted class (every object slot of the class and its bases)."""

    cdef readonly type cls
    cdef readonly tuple names
    cdef Py_ssize_t *_off
    cdef Py_ssize_t _n

    def __cinit__(self, type cls):
        cdef PyMemberDescrObject *d
        cdef list names = []
        cdef list offs = []
        for c in cls.__mro__:
            if "__dict__" in c.__dict__ and c is not object:
                raise TypeError(f"{cls.__name__} instances have a __dict__: not a slotted class")
            for name, descr in c.__dict__.items():
                if type(descr).__name__ != "member_descriptor":
                    continue
                d = <PyMemberDescrObject *><PyObject *>descr
                if d.d_member.type != T_OBJECT_EX:
                    raise TypeError(f"{cls.__name__}.{name} is not an object slot")
                if d.d_member.offset in offs:
                    continue
                names.append(name)
                offs.append(d.d_member.offset)
        self._off = <Py_ssize_t *>malloc(max(len(offs), 1) * sizeof(Py_ssize_t))
        if self._off == NULL:
            raise MemoryError()
        for k, off in enumerate(offs):
            self._off[k] = off
        self._n = len(offs)
        self.cls = cls
        self.names = tuple(names)

    def __dealloc__(self):
        free(self._off)

    def clone(self, obj):
        """A new ``cls`` instance (``__init__`` not run) whose slots hold what ``obj``'s hold."""
        cdef PyObject **dst
        cdef PyObject *v
        cdef Py_ssize_t k
        cdef _CloneType *t = <_CloneType *><PyObject *>self.cls
        cdef PyObject *p
        if type(obj) is not self.cls:
            raise TypeError(f"not a {self.cls.__name__}")
        p = t.tp_alloc(t, 0)  # what object.__new__ does for it: zeroed slots, GC-tracked
        if p == NULL:
            raise MemoryError()
        new = <object>p
        Py_XDECREF(p)  # (the <object> cast took a reference of its own)
        for k in range(self._n):
            v = _slot(obj, self._off[k])
            Py_XINCREF(v)
            dst = <PyObject **>((<char *><PyObject *>new) + self._off[k])
            Py_XDECREF(dst[0])
            dst[0] = v
        return new

    def values(self, obj):
        """The slots' values as a tuple, in ``names`` order (None for an unset slot)."""
        cdef PyObject *v
        cdef Py_ssize_t k
        if type(obj) is not self.cls:
            raise TypeError(f"not a {self.cls.__name__}")
        out = []
        for k in range(self._n):
            v = _slot(obj, self._off[k])
            out.append(None if v == NULL else <object>v)
        return tuple(out)

    def matches(self, obj, tuple values):
        """Whether ``obj``'s slots hold ``values`` (``values(obj)`` of an earlier moment): each the same
        object or an equal one. One pass in C, no tuple built."""
        cdef PyObject *v
        cdef Py_ssize_t k
        if type(obj) is not self.cls or len(values) != self._n:
            return False
        for k in range(self._n):
            v = _slot(obj, self._off[k])
            w = values[k]
            if v == NULL:
                if w is not None:
                    return False
            elif v != <PyObject *>w and not (<object>v == w):
                return False
        return True
