use super::*;

#[test]
fn months_start_on_the_first_in_utc_whatever_their_length() {
    // 2026-12-03T16:00:00Z, in December 2026.
    let now = 1_796_313_600;
    assert_eq!(month_start(now), 1_796_083_200, "2026-12-01");
    assert_eq!(next_month(month_start(now)), 1_798_761_600, "2027-01-01");
    assert_eq!(previous_month(1_796_083_200), 1_793_491_200, "2026-11-01");
    // February of a leap year is 29 days, of another 28.
    let feb_2028 = days(2028, 2, 1) * DAY;
    assert_eq!(next_month(feb_2028) - feb_2028, 29 * DAY);
    let feb_2027 = days(2027, 2, 1) * DAY;
    assert_eq!(next_month(feb_2027) - feb_2027, 28 * DAY);
    assert_eq!(month_start(0), 0);
    assert_eq!(next_month(0), 31 * DAY, "1970-02-01");
    // Every day of 1970..2100 round-trips and its month holds it.
    for day in 0..47_482 {
        let (y, m, d) = civil(day);
        assert_eq!(days(y, m, d), day);
        let s = month_start(day * DAY + 5);
        assert!(s <= day * DAY && day * DAY < next_month(s));
    }
}
