# SPDX-License-Identifier: Apache-2.0
# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
# cython: embedsignature=True, initializedcheck=False
"""The compiled DLPack core: the Tensor view, capsule import and export.

One extension built from one file per concern, included below in dependency order
(the table of contents); each file starts with what it holds.

Ownership invariants (docs/design.md, "Ownership and lifetime", which lists the
owner kinds):

1. A Tensor either *owns* its memory (``_owner_kind != OWN_NONE``: a producer's
   managed tensor, a Py_buffer, a reference to a NumPy array whose struct it read,
   or an allocation of ours) or is a *view* whose
   ``_base`` is the owning Tensor (never a chain of views).
2. Importing a capsule: the name says the struct kind; every field is validated
   before the capsule is touched (a refused capsule keeps its name and is freed by
   its own destructor); then the Tensor takes the pointer and the capsule is
   renamed ``used_*``, with nothing in between that can fail. Managed tensors from
   a C exchange table are owned from the start: a refused one is released by the
   Tensor that adopted it.
3. ``__dealloc__`` of an owner calls the producer's deleter once (if not NULL).
   Views keep the owner alive, so the deleter runs when the last view dies.
4. Exported managed tensors hold a strong reference to the exporting Tensor
   in ``manager_ctx``; see _lifetime.h for the deleters and destructors.
5. Shape and strides are always copied into the Tensor: nothing points into a
   producer's arrays after the import returns.
"""

# Table of contents. Textual includes: one extension, so hot paths stay direct C
# calls; each file is one concern and starts by saying what it holds.
include "_constants.pxi"      # constants, owner kinds, dtype and device tables
include "_tensor.pxi"         # the Tensor: fields, Python protocols, surface helpers
include "_layout.pxi"         # C strides, layout bounds, reshape, dtype views
include "_indexing.pxi"       # basic indexing as views
include "_ownership.pxi"      # adopt, call deleters once, the deferral queue
include "_alloc.pxi"          # allocation, strided copies, views
include "_capsules.pxi"       # __dlpack__ arguments, consume, export, inspect
include "_buffers.pxi"        # buffer protocol, PEP 3118 formats, NumPy arrays in
include "_ndarray.pxi"        # NumPy arrays out, through NumPy's C API table
include "_arrow.pxi"          # the Arrow C data interface: arrays and streams in
include "_sequences.pxi"      # nested Python sequences
include "_quirks.pxi"         # producer quirks at C speed (PyTorch bit views)
include "_exchange_api.pxi"   # the C exchange API: type cache, consumer, producer table
include "_negotiate.pxi"      # from_dlpack negotiation, to_dlpack
include "_routes.pxi"         # convert's routes: decided once, cached, run in C
include "_front.pxi"          # asarray/convert front doors, Python fallbacks
