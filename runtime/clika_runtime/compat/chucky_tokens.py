"""The tokens Chucky SDK code passes: an HS256-signed JWT with user, project and budget claims.

A local model checks none of them; they are made so code that creates them runs unchanged.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import time
from typing import Any


def create_budget(
    *, ai_dollars: float = 0.0, compute_hours: float = 0.0, window: str = "day"
) -> dict[str, Any]:
    """A budget claim for :func:`create_token` (a local model spends nothing against it)."""
    return {"ai_dollars": ai_dollars, "compute_hours": compute_hours, "window": window}


def create_token(
    *,
    user_id: str,
    project_id: str,
    secret: str,
    budget: dict[str, Any] | None = None,
    expires_in: int = 3600,
) -> str:
    """An HS256-signed JWT carrying the user, project and budget claims."""
    header = {"alg": "HS256", "typ": "JWT"}
    now = int(time.time())
    claims = {"sub": user_id, "iss": project_id, "iat": now, "exp": now + expires_in, "budget": budget or {}}
    signing_input = f"{_b64(header)}.{_b64(claims)}"
    signature = hmac.new(secret.encode(), signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{base64.urlsafe_b64encode(signature).rstrip(b'=').decode()}"


def _b64(value: dict[str, Any]) -> str:
    raw = json.dumps(value, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
