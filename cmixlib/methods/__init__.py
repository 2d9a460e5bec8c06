"""The context-mixing methods, a module each, with their registry
(:mod:`cmixlib.methods.registry`: every method's name, label, colour and kind) and the entry
point (:mod:`cmixlib.methods.dispatch`: :func:`cmixlib.context_mixing`). The package itself
defines nothing: the public names are in :mod:`cmixlib`, the rest in the modules."""
