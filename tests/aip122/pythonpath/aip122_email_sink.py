"""An ``[email] email_backend`` that records each e-mail to ``$AIP122G_OUT/emails.jsonl`` (tests only)."""

from __future__ import annotations

import json
import os


def send_email(to, subject, html_content, **kwargs):
    with open(os.path.join(os.environ.get("AIP122G_OUT", "/tmp"), "emails.jsonl"), "a") as f:
        f.write(json.dumps({"pid": os.getpid(), "to": to, "subject": subject, "html": html_content}) + "\n")
