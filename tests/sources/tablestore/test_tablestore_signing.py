"""V2 request signing and the response checks, against string-to-sign texts built by hand."""

from __future__ import annotations

import base64
import hashlib
import hmac
from datetime import datetime, timedelta, timezone

import pytest

from airflow_provider_cdc.sources.tablestore.protocol.signing import (
    API_VERSION,
    SignatureError,
    request_headers,
    response_headers,
    verify_request,
    verify_response,
)

NOW = datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc)
BODY = b"\x0a\x03abc"


def sign(secret: str, text: str) -> str:
    return base64.b64encode(hmac.new(secret.encode(), text.encode(), hashlib.sha1).digest()).decode()


def test_request_signature_follows_the_v2_formula():
    headers = request_headers(
        "/GetStreamRecord", BODY, access_key_id="AK", access_key_secret="SK", instance="inst", now=NOW
    )
    md5 = base64.b64encode(hashlib.md5(BODY).digest()).decode()
    expected_text = (
        "/GetStreamRecord\nPOST\n\n"
        f"x-ots-accesskeyid:AK\nx-ots-apiversion:{API_VERSION}\nx-ots-contentmd5:{md5}\n"
        "x-ots-date:2024-05-06T07:08:09.000Z\nx-ots-instancename:inst\n"
    )
    assert headers["x-ots-date"] == "2024-05-06T07:08:09.000Z"
    assert headers["x-ots-contentmd5"] == md5
    assert headers["x-ots-signature"] == sign("SK", expected_text)


def test_sts_token_is_signed():
    headers = request_headers(
        "/ListStream", b"", access_key_id="AK", access_key_secret="SK", instance="i", now=NOW, sts_token="tok"
    )
    assert headers["x-ots-ststoken"] == "tok"
    assert verify_request("/ListStream", headers, b"", secrets={"AK": "SK"}, now=NOW) == "AK"
    tampered = {**headers, "x-ots-ststoken": "other"}
    with pytest.raises(SignatureError, match="x-ots-signature does not match"):
        verify_request("/ListStream", tampered, b"", secrets={"AK": "SK"}, now=NOW)


def test_verify_request_accepts_any_header_case():
    headers = request_headers(
        "/ListStream", BODY, access_key_id="AK", access_key_secret="SK", instance="i", now=NOW
    )
    wire = {name.title(): value for name, value in headers.items()}
    assert (
        verify_request("/ListStream", wire, BODY, secrets={"AK": "SK"}, now=NOW + timedelta(minutes=14))
        == "AK"
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h, b: (h, b + b"x"), "x-ots-contentmd5 does not match"),
        (lambda h, b: ({**h, "x-ots-signature": "AAAA"}, b), "x-ots-signature does not match"),
        (lambda h, b: ({**h, "x-ots-accesskeyid": "nobody"}, b), "unknown access key id 'nobody'"),
        (lambda h, b: ({k: v for k, v in h.items() if k != "x-ots-date"}, b), "lacks the header.*x-ots-date"),
        (lambda h, b: ({**h, "x-ots-apiversion": "2014-08-08"}, b), "x-ots-apiversion"),
        (lambda h, b: ({**h, "x-ots-date": "yesterday"}, b), "is not of the form"),
    ],
)
def test_verify_request_refuses(change, message):
    headers = request_headers(
        "/ListStream", BODY, access_key_id="AK", access_key_secret="SK", instance="i", now=NOW
    )
    headers, body = change(headers, BODY)
    with pytest.raises(SignatureError, match=message):
        verify_request("/ListStream", headers, body, secrets={"AK": "SK"}, now=NOW)


def test_verify_request_refuses_a_skewed_date():
    headers = request_headers(
        "/ListStream", BODY, access_key_id="AK", access_key_secret="SK", instance="i", now=NOW
    )
    with pytest.raises(SignatureError, match="away from"):
        verify_request("/ListStream", headers, BODY, secrets={"AK": "SK"}, now=NOW + timedelta(minutes=16))


def test_response_authorization_follows_the_formula():
    headers = response_headers(
        "/DescribeStream", BODY, access_key_id="AK", access_key_secret="SK", request_id="rid", now=NOW
    )
    md5 = base64.b64encode(hashlib.md5(BODY).digest()).decode()
    expected_text = (
        f"x-ots-contentmd5:{md5}\nx-ots-contenttype:protocol buffer\nx-ots-date:2024-05-06T07:08:09.000Z\n"
        "x-ots-requestid:rid\n/DescribeStream"
    )
    assert headers["authorization"] == f"OTS AK:{sign('SK', expected_text)}"
    verify_response("/DescribeStream", headers, BODY, access_key_id="AK", access_key_secret="SK", now=NOW)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda h, b: (h, b + b"x"), "x-ots-contentmd5 does not match"),
        (lambda h, b: ({**h, "x-ots-requestid": "other"}, b), "authorization signature does not match"),
        (lambda h, b: ({**h, "authorization": "OTS BK:sig"}, b), "is not 'OTS AK:<signature>'"),
        (lambda h, b: ({k: v for k, v in h.items() if k != "x-ots-contenttype"}, b), "x-ots-contenttype"),
    ],
)
def test_verify_response_refuses(change, message):
    headers = response_headers(
        "/ListStream", BODY, access_key_id="AK", access_key_secret="SK", request_id="r", now=NOW
    )
    headers, body = change(headers, BODY)
    with pytest.raises(SignatureError, match=message):
        verify_response("/ListStream", headers, body, access_key_id="AK", access_key_secret="SK", now=NOW)


def test_verify_response_refuses_a_skewed_date():
    headers = response_headers(
        "/ListStream", BODY, access_key_id="AK", access_key_secret="SK", request_id="r", now=NOW
    )
    with pytest.raises(SignatureError, match="away from"):
        verify_response(
            "/ListStream",
            headers,
            BODY,
            access_key_id="AK",
            access_key_secret="SK",
            now=NOW - timedelta(hours=1),
        )
