import pytest

from llmgw.config.types import Address, AddressOrOff, Duration, Size


@pytest.mark.parametrize(
    "text, seconds",
    [("250ms", 0.25), ("10s", 10), ("5m", 300), ("1h30m", 5400), ("24h", 86400), ("7d", 604800), ("0", 0),
     ("1.5s", 1.5)],
)
def test_durations_are_read_in_the_units_people_write(text, seconds):
    assert Duration(text) == seconds


@pytest.mark.parametrize("text", ["250ms", "10s", "5m", "1h30m", "7d", "1d2h3m4s5ms", "0s"])
def test_a_duration_prints_back_as_it_was_written(text):
    assert str(Duration(text)) == text
    assert Duration(str(Duration(text))) == Duration(text)


def test_a_duration_prints_in_days_hours_minutes_and_seconds():
    assert str(Duration(90)) == "1m30s"
    assert str(Duration("90m")) == "1h30m"
    assert str(Duration(0.1)) == "100ms"


def test_a_bare_number_is_refused_as_a_duration_with_the_units_to_use():
    with pytest.raises(ValueError) as err:
        Duration.parse(10)
    assert str(err.value) == "expected a duration like 10s, got 10"
    with pytest.raises(ValueError) as err:
        Duration("10")
    assert "say which unit, as in 10s or 10ms" in str(err.value)


def test_zero_needs_no_unit():
    assert Duration.parse(0) == 0


@pytest.mark.parametrize("text", ["soon", "10 parsecs", "-5s", "1h-30m", ""])
def test_what_is_not_a_duration_is_refused(text):
    with pytest.raises(ValueError, match="expected a duration like 10s"):
        Duration(text)


@pytest.mark.parametrize(
    "text, size",
    [("256MB", 256 * 1024**2), ("1GiB", 1024**3), ("512KB", 512 * 1024), ("64kB", 64 * 1024),
     ("1048576", 1048576), ("2 MB", 2 * 1024**2), ("100B", 100), ("0", 0)],
)
def test_sizes_are_read_in_the_units_people_write(text, size):
    assert Size(text) == size


def test_a_size_may_be_given_as_a_whole_number_of_bytes():
    assert Size.parse(1048576) == Size("1MB")


@pytest.mark.parametrize("size, text", [(Size("256MB"), "256MB"), (Size("1GiB"), "1GB"), (Size(1536), "1536B"),
                                        (Size(1048576), "1MB"), (Size(0), "0B")])
def test_a_size_prints_back_in_its_largest_exact_unit(size, text):
    assert str(size) == text
    assert Size(str(size)) == size


@pytest.mark.parametrize("value", ["lots", "1.5B", "-1MB", 1.5, True])
def test_what_is_not_a_size_is_refused_with_the_expected_form(value):
    with pytest.raises(ValueError, match="expected a size like 256MB"):
        Size.parse(value)


def test_an_address_is_split_into_host_and_port():
    assert (Address(":8080").host, Address(":8080").port) == ("", 8080)
    assert (Address("127.0.0.1:9090").host, Address("127.0.0.1:9090").port) == ("127.0.0.1", 9090)
    assert (Address("[::1]:8080").host, Address("[::1]:8080").port) == ("::1", 8080)
    assert Address("0.0.0.0:0").port == 0
    assert str(Address("[::1]:8080")) == "[::1]:8080"


def test_an_empty_host_means_every_interface_and_is_not_loopback():
    assert Address(":8080").all_interfaces
    assert not Address(":8080").is_loopback
    assert Address("127.0.0.1:9090").is_loopback
    assert Address("[::1]:9090").is_loopback
    assert Address("localhost:9090").is_loopback
    assert not Address("10.0.0.5:9090").is_loopback


@pytest.mark.parametrize("text, why", [("8080", "the port is missing"), ("::1:8080", "in brackets"),
                                       (":99999", "from 0 to 65535"), ("off", "can't be turned off")])
def test_a_wrong_address_says_what_is_wrong_with_it(text, why):
    with pytest.raises(ValueError) as err:
        Address(text)
    assert str(err.value).startswith("expected an address like :8080")
    assert why in str(err.value)


def test_a_listener_that_can_be_turned_off_takes_the_word_off():
    assert AddressOrOff("off").off
    assert not AddressOrOff(":9091").off
    assert AddressOrOff(":9091").port == 9091
