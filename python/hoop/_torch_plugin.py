"""The entry point (group "torch.backends") that torch >= 2.5 loads at `import torch`: it
registers the torch.distributed backend "hoop", so that an installed hoop needs no
`import hoop.torch`. It never raises (torch would turn that into a failed `import torch`): a
failure is a warning, and `import hoop.torch` then raises it with its detail. Set
TORCH_DEVICE_BACKEND_AUTOLOAD=0 to have torch load no such entry point."""


def register():
    try:
        import hoop.torch  # noqa: F401 - registers the backend
    except Exception as e:  # noqa: BLE001 - nothing may escape into `import torch`
        try:
            import warnings

            warnings.warn("hoop: the torch.distributed backend \"hoop\" could not be registered "
                          "(%s: %s); `import hoop.torch` shows where" % (type(e).__name__, e),
                          RuntimeWarning, stacklevel=2)
        except Exception:  # noqa: BLE001 - warnings turned into errors
            pass
