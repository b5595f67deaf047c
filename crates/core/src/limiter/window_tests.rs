use super::*;

#[test]
fn windows_align_to_the_epoch() {
    let w = Window::containing(Unit::Minute, Now(1_000_059));
    assert_eq!(w.start, WindowStart(1_000_020));
    assert_eq!(w.seconds_until_reset(Now(1_000_059)), 21);
    assert_eq!(
        Window::containing(Unit::Hour, Now(1_000_000)).start.0,
        997_200
    );
    assert_eq!(Window::containing(Unit::Second, Now(1234)).start.0, 1234);
}

#[test]
fn reset_is_the_full_unit_at_a_boundary() {
    let w = Window::containing(Unit::Minute, Now(120));
    assert_eq!(w.seconds_until_reset(Now(120)), 60);
    let s = Window::containing(Unit::Second, Now(5));
    assert_eq!(s.seconds_until_reset(Now(5)), 1);
}

#[test]
fn weeks_start_on_thursday_and_months_are_30_days() {
    // 1970-01-01 was a Thursday; 1970-01-08 00:00 UTC is the next week.
    assert_eq!(Window::containing(Unit::Week, Now(604_799)).start.0, 0);
    assert_eq!(
        Window::containing(Unit::Week, Now(604_800)).start.0,
        604_800
    );
    assert_eq!(Unit::Month.seconds(), 30 * 86_400);
    assert_eq!(Unit::Year.seconds(), 365 * 86_400);
}

#[test]
fn any_window_aligns_and_reports_a_unit_envoy_knows() {
    let p = Period::Seconds(90);
    let w = Window::containing(p, Now(1_000));
    assert_eq!(w.start.0, 990);
    assert_eq!(w.previous().start.0, 900);
    assert_eq!(p.reported_unit(), Unit::Minute);
    assert_eq!(p.reported_limit(30), 20);
    assert_eq!(Period::Seconds(1).reported_limit(5), 5);
    assert_eq!(Period::Seconds(7200).reported_unit(), Unit::Hour);
    assert_eq!(Period::Seconds(7200).reported_limit(1), 1, "never 0");
    assert_eq!(Period::Unit(Unit::Day).reported_limit(7), 7);
    assert_eq!(Period::Seconds(90).to_string(), "90S");
    assert_eq!(Period::Unit(Unit::Hour).to_string(), "HOUR");
}

#[test]
fn units_parse_in_any_case_and_map_to_proto() {
    assert_eq!(Unit::parse("minute"), Some(Unit::Minute));
    assert_eq!(Unit::parse("HoUr"), Some(Unit::Hour));
    assert_eq!(Unit::parse("unknown"), None);
    assert_eq!(Unit::parse("foo"), None);
    for u in Unit::ALL {
        assert_eq!(Unit::from_proto(u.proto()), Some(u));
    }
    assert_eq!(Unit::from_proto(0), None);
    assert_eq!(Unit::Week.proto(), 7);
}
