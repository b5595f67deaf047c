use super::*;

#[test]
fn every_way_of_writing_an_address_is_masked() {
    for (key, value, want) in [
        ("remote_address", "203.0.113.7", "203.0.x.x"),
        ("remote_address", "203.0.113.7:8080", "203.0.x.x"),
        ("remote_address", "  203.0.113.7 ", "203.0.x.x"),
        ("remote_address", "203.0.113.7/32", "203.0.x.x"),
        ("remote_address", "[2001:db8:1:2::9]:443", "2001:db8:…"),
        ("remote_address", "fe80::1%eth0", "fe80:0:…"),
        (
            "x-forwarded-for",
            "203.0.113.7, 198.51.100.2",
            "203.0.x.x,198.51.x.x",
        ),
        ("x-forwarded-for", "203.0.113.7, unknown", "203.0.x.x,?"),
        ("remote_address", "0313.0.0161.7", "203.0.x.x"),
        ("remote_address", "0xcb.0.0x71.7", "203.0.x.x"),
        ("remote_address", "203.29959", "203.0.x.x"),
        ("remote_address", "3405803783", "203.0.x.x"),
        ("client_ip", "0xcb007107", "203.0.x.x"),
        ("v", "::ffff:203.0.113.7", "203.0.x.x"),
    ] {
        assert_eq!(mask(key, value).as_deref(), Some(want), "{key}={value}");
    }
}

#[test]
fn what_is_not_an_address_is_left_alone() {
    for (key, value) in [
        ("api_key", "3405803783"),
        ("path", "/login"),
        ("user", "alice"),
        ("version", "1.2.3.4.5"),
        ("remote_address", "999.1.1.1"),
    ] {
        assert_eq!(mask(key, value), None, "{key}={value}");
    }
}
