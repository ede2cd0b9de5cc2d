"""Tablestore request signing (V2, HMAC-SHA1; V4, HMAC-SHA256) and the checks both ends make on the
other's headers.

A request carries ``x-ots-date``, ``x-ots-apiversion``, ``x-ots-accesskeyid``, ``x-ots-instancename``,
``x-ots-contentmd5`` (base64 MD5 of the body), optionally ``x-ots-ststoken``, and
``x-ots-signature = base64(HMAC-SHA1(secret, string_to_sign))`` with::

    string_to_sign = path + "\\n" + "POST" + "\\n" + "" + "\\n"
                     + "\\n".join(sorted(f"{name.lower()}:{value.strip()}" for x-ots-* headers)) + "\\n"

A V4 request (what the SDK sends when given a region) adds ``x-ots-signdate`` (``%Y%m%d``) and
``x-ots-signregion`` before signing, and carries ``x-ots-signaturev4`` instead of ``x-ots-signature``::

    signing_key  = base64(HMAC-SHA256(HMAC-SHA256(HMAC-SHA256(HMAC-SHA256(
                       "aliyun_v4" + secret, sign_date), region), "ots"), "aliyun_v4_request"))
    x-ots-signaturev4 = base64(HMAC-SHA256(signing_key, string_to_sign + "ots"))

A response carries ``x-ots-contentmd5``, ``x-ots-requestid``, ``x-ots-date``, ``x-ots-contenttype`` and
``authorization: OTS <access key id>:<base64(HMAC-SHA1(key, canonical x-ots-* headers + "\\n" + path))>``,
where ``key`` is the secret for a V2 request and the V4 signing key for a V4 request. Dates are
``%Y-%m-%dT%H:%M:%S.000Z`` (UTC) and must lie within ``max_skew`` of the checker's clock; a V4 sign
date must be the UTC date of the request's ``x-ots-date`` or a day next to it.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping
from datetime import datetime, timedelta, timezone

API_VERSION = "2015-12-31"
CONTENT_TYPE = "protocol buffer"
DATE_FORMAT = "%Y-%m-%dT%H:%M:%S.000Z"
SIGNATURE_HEADER = "x-ots-signature"
V4_SIGNATURE_HEADER = "x-ots-signaturev4"
V4_DATE_HEADER = "x-ots-signdate"
V4_REGION_HEADER = "x-ots-signregion"
V4_DATE_FORMAT = "%Y%m%d"
V4_SALT = "ots"
_V4_PREFIX = "aliyun_v4"
_V4_PRODUCT = "ots"
_V4_CONSTANT = "aliyun_v4_request"
_SIGNATURE_HEADERS = (SIGNATURE_HEADER, V4_SIGNATURE_HEADER)
REQUEST_HEADERS = (
    "x-ots-date",
    "x-ots-apiversion",
    "x-ots-accesskeyid",
    "x-ots-instancename",
    "x-ots-contentmd5",
    SIGNATURE_HEADER,
)
RESPONSE_HEADERS = ("x-ots-contentmd5", "x-ots-requestid", "x-ots-date", "x-ots-contenttype", "authorization")


class SignatureError(ValueError):
    """A request or response whose headers fail the signature, digest, date or presence checks."""


def format_date(now: datetime) -> str:
    """``x-ots-date`` text of ``now`` (UTC, whole seconds)."""
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    return now.astimezone(timezone.utc).strftime(DATE_FORMAT)


def content_md5(body: bytes) -> str:
    """Base64 of the MD5 digest of ``body`` (``x-ots-contentmd5``)."""
    return base64.b64encode(hashlib.md5(body).digest()).decode("ascii")


def _hmac_sha1(secret: str, text: str) -> str:
    digest = hmac.new(secret.encode("utf-8"), text.encode("utf-8"), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def _hmac_sha256(key: str | bytes, text: str) -> bytes:
    raw = key.encode("utf-8") if isinstance(key, str) else key
    return hmac.new(raw, text.encode("utf-8"), hashlib.sha256).digest()


def v4_signing_key(access_key_secret: str, sign_date: str, region: str) -> str:
    """The V4 signing key (base64 text) of a secret for a sign date (``%Y%m%d``) and a region."""
    key = _hmac_sha256(_V4_PREFIX + access_key_secret, sign_date)
    for part in (region, _V4_PRODUCT, _V4_CONSTANT):
        key = _hmac_sha256(key, part)
    return base64.b64encode(key).decode("ascii")


def v4_signature(signing_key: str, path: str, headers: Mapping[str, str]) -> str:
    """``x-ots-signaturev4`` of a request: its string to sign, salted, under the V4 signing key."""
    digest = _hmac_sha256(signing_key, request_string_to_sign(path, headers) + V4_SALT)
    return base64.b64encode(digest).decode("ascii")


def canonical_headers(headers: Mapping[str, str]) -> str:
    """The sorted ``name:value`` lines of the ``x-ots-*`` headers but the signatures, joined by newlines."""
    lines = sorted(
        f"{name.lower().strip()}:{value.strip()}"
        for name, value in headers.items()
        if name.lower().startswith("x-ots-") and name.lower() not in _SIGNATURE_HEADERS
    )
    return "\n".join(lines)


def request_string_to_sign(path: str, headers: Mapping[str, str]) -> str:
    """What a request's ``x-ots-signature`` signs (no query string: every call is a bare POST)."""
    return f"{path}\nPOST\n\n{canonical_headers(headers)}\n"


def response_string_to_sign(path: str, headers: Mapping[str, str]) -> str:
    """What a response's ``authorization`` signs."""
    return f"{canonical_headers(headers)}\n{path}"


def request_headers(
    path: str,
    body: bytes,
    *,
    access_key_id: str,
    access_key_secret: str,
    instance: str,
    now: datetime,
    sts_token: str | None = None,
    region: str | None = None,
    sign_date: str | None = None,
) -> dict[str, str]:
    """The ``x-ots-*`` headers of a request, its signature included: V2 (``x-ots-signature``), or V4
    (``x-ots-signaturev4``) for ``region``, signed for ``sign_date`` (default: ``now``'s UTC date)."""
    headers = {
        "x-ots-date": format_date(now),
        "x-ots-apiversion": API_VERSION,
        "x-ots-accesskeyid": access_key_id,
        "x-ots-instancename": instance,
        "x-ots-contentmd5": content_md5(body),
    }
    if sts_token is not None:
        headers["x-ots-ststoken"] = sts_token
    if region is None:
        headers[SIGNATURE_HEADER] = _hmac_sha1(access_key_secret, request_string_to_sign(path, headers))
        return headers
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    headers[V4_DATE_HEADER] = sign_date or now.astimezone(timezone.utc).strftime(V4_DATE_FORMAT)
    headers[V4_REGION_HEADER] = region
    key = v4_signing_key(access_key_secret, headers[V4_DATE_HEADER], region)
    headers[V4_SIGNATURE_HEADER] = v4_signature(key, path, headers)
    return headers


def _lower(headers: Mapping[str, str]) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


def _check_date(text: str, now: datetime, max_skew: timedelta, side: str) -> None:
    try:
        sent = datetime.strptime(text.strip(), DATE_FORMAT).replace(tzinfo=timezone.utc)
    except ValueError:
        raise SignatureError(f"{side} x-ots-date {text!r} is not of the form {DATE_FORMAT}") from None
    if now.tzinfo is None:
        now = now.replace(tzinfo=timezone.utc)
    skew = abs(sent - now)
    if skew > max_skew:
        raise SignatureError(
            f"{side} x-ots-date {text} is {skew} away from {format_date(now)} (at most {max_skew} allowed)"
        )


def verify_request(
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    secrets: Mapping[str, str],
    now: datetime,
    max_skew: timedelta = timedelta(minutes=15),
    region: str | None = None,
) -> str:
    """Check a request's headers, digest, date and signature (V2, or V4 when it carries
    ``x-ots-signaturev4``; V4 for ``region`` only, when given); return its access key id."""
    lowered = _lower(headers)
    v4 = V4_SIGNATURE_HEADER in lowered
    required = (
        (*REQUEST_HEADERS[:-1], V4_SIGNATURE_HEADER, V4_DATE_HEADER, V4_REGION_HEADER)
        if v4
        else REQUEST_HEADERS
    )
    missing = [name for name in required if name not in lowered]
    if missing:
        raise SignatureError(f"request to {path} lacks the header(s) {', '.join(missing)}")
    if lowered["x-ots-apiversion"].strip() != API_VERSION:
        raise SignatureError(
            f"request to {path} has x-ots-apiversion {lowered['x-ots-apiversion']!r}, expected {API_VERSION}"
        )
    key_id = lowered["x-ots-accesskeyid"].strip()
    if key_id not in secrets:
        raise SignatureError(f"request to {path} is signed with the unknown access key id {key_id!r}")
    if lowered["x-ots-contentmd5"].strip() != content_md5(body):
        raise SignatureError(f"request to {path}: x-ots-contentmd5 does not match the body")
    _check_date(lowered["x-ots-date"], now, max_skew, f"request to {path}:")
    if v4:
        _check_v4_scope(path, lowered, region)
        key = v4_signing_key(
            secrets[key_id], lowered[V4_DATE_HEADER].strip(), lowered[V4_REGION_HEADER].strip()
        )
        if not hmac.compare_digest(v4_signature(key, path, lowered), lowered[V4_SIGNATURE_HEADER].strip()):
            raise SignatureError(
                f"request to {path}: x-ots-signaturev4 does not match (access key id {key_id!r})"
            )
        return key_id
    expected = _hmac_sha1(secrets[key_id], request_string_to_sign(path, lowered))
    if not hmac.compare_digest(expected, lowered[SIGNATURE_HEADER].strip()):
        raise SignatureError(f"request to {path}: x-ots-signature does not match (access key id {key_id!r})")
    return key_id


def _check_v4_scope(path: str, lowered: Mapping[str, str], region: str | None) -> None:
    text = lowered[V4_DATE_HEADER].strip()
    try:
        signed = datetime.strptime(text, V4_DATE_FORMAT).date()
    except ValueError:
        raise SignatureError(
            f"request to {path}: x-ots-signdate {text!r} is not of the form {V4_DATE_FORMAT}"
        ) from None
    sent = datetime.strptime(lowered["x-ots-date"].strip(), DATE_FORMAT).date()
    if abs((signed - sent).days) > 1:
        raise SignatureError(f"request to {path}: x-ots-signdate {text} is not the date of x-ots-date {sent}")
    signed_region = lowered[V4_REGION_HEADER].strip()
    if not signed_region:
        raise SignatureError(f"request to {path}: x-ots-signregion is empty")
    if region is not None and signed_region != region:
        raise SignatureError(
            f"request to {path}: x-ots-signregion {signed_region!r} is not this instance's region {region!r}"
        )


def response_signing_key(headers: Mapping[str, str], access_key_secret: str) -> str:
    """The key a response to a verified request is signed with: the secret (V2), the V4 signing key (V4)."""
    lowered = _lower(headers)
    if V4_SIGNATURE_HEADER not in lowered:
        return access_key_secret
    return v4_signing_key(
        access_key_secret, lowered[V4_DATE_HEADER].strip(), lowered[V4_REGION_HEADER].strip()
    )


def response_headers(
    path: str, body: bytes, *, access_key_id: str, access_key_secret: str, request_id: str, now: datetime
) -> dict[str, str]:
    """The headers a response must carry for a client's checks, ``authorization`` included (signed with
    ``access_key_secret``: pass :func:`response_signing_key` for a V4 request)."""
    headers = {
        "x-ots-contentmd5": content_md5(body),
        "x-ots-requestid": request_id,
        "x-ots-date": format_date(now),
        "x-ots-contenttype": CONTENT_TYPE,
    }
    signature = _hmac_sha1(access_key_secret, response_string_to_sign(path, headers))
    headers["authorization"] = f"OTS {access_key_id}:{signature}"
    return headers


def verify_response(
    path: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    access_key_id: str,
    access_key_secret: str,
    now: datetime,
    max_skew: timedelta = timedelta(minutes=15),
) -> None:
    """Check a response's headers, digest, date and ``authorization`` signature."""
    lowered = _lower(headers)
    missing = [name for name in RESPONSE_HEADERS if name not in lowered]
    if missing:
        raise SignatureError(f"response from {path} lacks the header(s) {', '.join(missing)}")
    if lowered["x-ots-contentmd5"].strip() != content_md5(body):
        raise SignatureError(f"response from {path}: x-ots-contentmd5 does not match the body")
    _check_date(lowered["x-ots-date"], now, max_skew, f"response from {path}:")
    authorization = lowered["authorization"].strip()
    prefix = f"OTS {access_key_id}:"
    if not authorization.startswith(prefix):
        raise SignatureError(f"response from {path}: authorization is not 'OTS {access_key_id}:<signature>'")
    expected = _hmac_sha1(access_key_secret, response_string_to_sign(path, lowered))
    if not hmac.compare_digest(expected, authorization[len(prefix) :]):
        raise SignatureError(f"response from {path}: the authorization signature does not match")
