"""`make lab`'s contents manager: the executed reports under reports/ open read-only.

JupyterLab marks an executed notebook modified as soon as it opens it (it rewrites a few metadata fields), and its
autosave then writes it back: browsing reports/ would change committed files. A document whose contents model says
`writable: false` is never autosaved, and saving it asks for another name (File > Save As...). Everything else
(notebooks/ included) is saved as usual. `make lab` passes
`--ServerApp.contents_manager_class=codelib.plumbing.lab.ReportsReadOnly`.
"""

from __future__ import annotations

from jupyter_server.services.contents.largefilemanager import AsyncLargeFileManager
from tornado.web import HTTPError

READ_ONLY = "reports"  # the folder, relative to the server's root (make lab: the repository)


def read_only(path: str) -> bool:
    """A file or folder inside reports/ (not reports/ itself)."""
    parts = [p for p in path.strip("/").split("/") if p]
    return len(parts) > 1 and parts[0] == READ_ONLY


class ReportsReadOnly(AsyncLargeFileManager):
    """The default contents manager, with every file inside reports/ shown as not writable and refused a save."""

    async def get(self, path, content=True, type=None, format=None, **kwargs):
        model = await super().get(path, content=content, type=type, format=format, **kwargs)
        if read_only(path):
            model["writable"] = False
        if model.get("type") == "directory" and isinstance(model.get("content"), list):
            for child in model["content"]:
                if read_only(child["path"]):
                    child["writable"] = False
        return model

    async def save(self, model, path=""):
        if read_only(path):
            raise HTTPError(403, f"{path} is a report (written by the pipeline): save a copy outside reports/")
        return await super().save(model, path)
