"""URLs: credentials are split off and never kept in the base URL."""

import pytest

from satbench.errors import UserError
from satbench.http.endpoint import is_loopback, redact_url, split_credentials


def test_credentials_are_removed_from_the_base_url():
    url, secret = split_credentials("https://user:s3cret@example.com:8443/")
    assert url == "https://example.com:8443" and secret == "s3cret"
    assert "s3cret" not in redact_url("https://user:s3cret@example.com:8443/")


@pytest.mark.parametrize("bad", ["example.com:8080", "ftp://h:1", "http://h:notaport"])
def test_bad_urls_are_user_errors(bad):
    with pytest.raises(UserError):
        split_credentials(bad)


def test_loopback_detection():
    assert is_loopback("http://127.0.0.1:8080") and is_loopback("http://localhost:1")
    assert not is_loopback("http://10.0.0.2:8080")
