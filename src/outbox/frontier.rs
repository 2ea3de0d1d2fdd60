//! How far back a claim that leaves destinations out must look.
//!
//! A claim that leaves out busy destinations ([`DestinationHealth::avoid`], and
//! the metered ones it claims apart) walks the due events in `next_attempt_at`
//! order past every event of those destinations. When one of them has a backlog
//! (one receiver at its cap with 150,000 events due), every such claim walks the
//! whole backlog: 906 ms a claim on PostgreSQL at 158,886 due, repeated on every
//! commit's wake, until the walks themselves are why delivery falls behind.
//!
//! A claim that came back short took every due event of the destinations it did
//! not leave out (unless one of its picks failed after another had committed:
//! [`Claimed::cut_short`], which proves nothing). So the next claim that leaves
//! out at least the same ones need only look at events due since that claim
//! began, plus [`LATE_COMMIT_MARGIN`] for transactions that stamped their events
//! before it and committed after it.
//! The window is measured on this process's monotonic clock and applied to the
//! database's (`next_attempt_at > now - window`), so no two clocks are compared.
//!
//! A destination left out then and not now may have events of any age: the claim
//! takes its due events whole first, through the destination index ([`Reach`]).
//! What a window can miss: an event committed later than the margin after it was
//! stamped, and a lane head released on another node (released here, the
//! settler marks the frontier stale). Both wait at most for the next full
//! walk, made every [`FULL_WALK_EVERY`] at least (or, while full walks keep
//! filling their batch, each after [`WALK_SHARE`] times the last one's duration),
//! never more than 1/[`WALK_SHARE`] of the time, so a long backlog's walk stays
//! a small share of the claim loop. A claim leaving nothing out never uses a window (it starts at
//! the head of the due events), but when it drains it proves the same for any set
//! left out after it.
//!
//! [`DestinationHealth::avoid`]: super::destinations::DestinationHealth::avoid
//! [`Claimed::cut_short`]: crate::store::ports::Claimed::cut_short

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How late after stamping its events a transaction may commit and still be
/// seen by the next windowed claim.
pub const LATE_COMMIT_MARGIN: Duration = Duration::from_millis(500);

/// The longest time between two full walks while destinations are left out.
pub const FULL_WALK_EVERY: Duration = Duration::from_secs(5);

/// A full walk that took `d` is not repeated before `WALK_SHARE × d` has passed.
const WALK_SHARE: u32 = 20;

/// Past this many destinations back from being left out, a claim walks everything
/// (one index range each is cheap only while they are few).
const MAX_READMITTED: usize = 8;

/// How far one claim looks ([`ClaimFrontier::reach`]).
#[derive(Debug, Default, PartialEq)]
pub struct Reach {
    /// Only events due within this many ms before now; `None`: every due event.
    pub window_ms: Option<i64>,
    /// With a window: destinations claimed whatever their events' age.
    pub readmitted: Vec<String>,
}

/// What the last drained claim proved: every due event outside `left_out` was
/// claimed by `swept_at`.
#[derive(Debug)]
struct Swept {
    left_out: Vec<String>,
    swept_at: Instant,
    next_full_walk: Instant,
}

/// One claim loop's memory of its last drained claim.
#[derive(Debug, Default)]
pub struct ClaimFrontier {
    swept: Option<Swept>,
    /// Set from the settler when a lane moved: a lane's next event may be stamped
    /// long before any window.
    stale: Arc<AtomicBool>,
}

impl ClaimFrontier {
    pub fn new() -> Self {
        ClaimFrontier {
            swept: None,
            stale: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Marks the frontier stale from elsewhere (the settler, when a lane moved).
    pub fn staleness(&self) -> Arc<AtomicBool> {
        self.stale.clone()
    }

    /// Drops what the last claim proved: the next claim walks everything.
    fn forget(&mut self) {
        self.swept = None;
    }

    /// How far a claim leaving out `left_out` must look: a full walk, or a window
    /// (in ms of the database's clock) and the destinations to claim whole.
    pub fn reach(&mut self, left_out: &[String], now: Instant) -> Reach {
        if self.stale.swap(false, Ordering::AcqRel) {
            self.forget();
            return Reach::default();
        }
        // A claim leaving nothing out starts at the head of the due events: it
        // walks nothing it does not take.
        if left_out.is_empty() {
            return Reach::default();
        }
        let Some(swept) = self.swept.as_ref() else {
            return Reach::default();
        };
        // A destination no longer left out has events the last claim did not
        // take, of any age: claimed whole, through the destination index.
        let readmitted: Vec<String> = swept
            .left_out
            .iter()
            .filter(|d| !left_out.contains(d))
            .cloned()
            .collect();
        if now >= swept.next_full_walk || readmitted.len() > MAX_READMITTED {
            return Reach::default();
        }
        let window = now.saturating_duration_since(swept.swept_at) + LATE_COMMIT_MARGIN;
        Reach {
            window_ms: Some(window.as_millis() as i64),
            readmitted,
        }
    }

    /// Records a claim leaving out `left_out`, begun at `began` and ended at
    /// `ended`, made with `window_ms`; `drained` when it took fewer events than
    /// it asked for.
    pub fn claimed(
        &mut self,
        left_out: &[String],
        window_ms: Option<i64>,
        drained: bool,
        began: Instant,
        ended: Instant,
    ) {
        let walked = ended.duration_since(began) * WALK_SHARE;
        // A claim that filled its batch proves nothing beyond what is already
        // known (that stays true: claims only ever take events). A full walk
        // leaving destinations out that filled its batch took the oldest due
        // events first, so the next one goes further; it is not repeated before
        // its share of time has passed.
        if !drained {
            if let (Some(swept), None, false) =
                (self.swept.as_mut(), window_ms, left_out.is_empty())
            {
                swept.next_full_walk = began + walked;
            }
            return;
        }
        // A drained claim leaving nothing out proves the same for every set a
        // later claim may leave out.
        let next_full_walk = match (&self.swept, window_ms) {
            (Some(swept), Some(_)) => swept.next_full_walk,
            _ => began + FULL_WALK_EVERY.max(walked),
        };
        self.swept = Some(Swept {
            left_out: left_out.to_vec(),
            swept_at: began,
            next_full_walk,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn left_out(origins: &[&str]) -> Vec<String> {
        origins.iter().map(|o| o.to_string()).collect()
    }

    /// The window a claim leaving out `left_out` gets.
    trait Window {
        fn window_ms(&mut self, left_out: &[String], now: Instant) -> Option<i64>;
    }

    impl Window for ClaimFrontier {
        fn window_ms(&mut self, left_out: &[String], now: Instant) -> Option<i64> {
            self.reach(left_out, now).window_ms
        }
    }

    const BUSY: &str = "https://busy.example:443";
    const OTHER: &str = "https://other.example:443";

    /// A frontier after one drained full walk leaving out BUSY, begun at `t0`.
    fn after_full_walk(t0: Instant) -> ClaimFrontier {
        let mut frontier = ClaimFrontier::new();
        assert_eq!(frontier.window_ms(&left_out(&[BUSY]), t0), None);
        frontier.claimed(
            &left_out(&[BUSY]),
            None,
            true,
            t0,
            t0 + Duration::from_millis(2),
        );
        frontier
    }

    #[test]
    fn a_drained_full_walk_lets_the_next_claim_look_back_only_since_it_began() {
        let t0 = Instant::now();
        let mut frontier = after_full_walk(t0);
        let later = t0 + Duration::from_millis(40);
        assert_eq!(
            frontier.window_ms(&left_out(&[BUSY]), later),
            Some(40 + LATE_COMMIT_MARGIN.as_millis() as i64)
        );
        // Leaving out more destinations takes a subset of what was looked at.
        assert!(frontier
            .window_ms(&left_out(&[BUSY, OTHER]), later)
            .is_some());
    }

    #[test]
    fn a_destination_no_longer_left_out_is_claimed_whole_beside_the_window() {
        let t0 = Instant::now();
        let mut frontier = after_full_walk(t0);
        let later = t0 + Duration::from_millis(40);
        assert_eq!(
            frontier.reach(&left_out(&[OTHER]), later),
            Reach {
                window_ms: Some(40 + LATE_COMMIT_MARGIN.as_millis() as i64),
                readmitted: left_out(&[BUSY]),
            }
        );
        // Too many back at once: a full walk.
        let mut many = ClaimFrontier::new();
        let origins: Vec<String> = (0..=MAX_READMITTED)
            .map(|i| format!("https://o{i}.example:443"))
            .collect();
        many.claimed(&origins, None, true, t0, t0);
        assert_eq!(many.reach(&left_out(&[OTHER]), later), Reach::default());
        // Nothing left out: the plain claim, from the head of the due events.
        assert_eq!(frontier.window_ms(&[], later), None);
        // One that took its whole batch (BUSY's events) leaves the frontier as it was.
        frontier.claimed(&[], None, false, later, later);
        let t2 = t0 + Duration::from_millis(60);
        assert_eq!(
            frontier.window_ms(&left_out(&[BUSY]), t2),
            Some(60 + LATE_COMMIT_MARGIN.as_millis() as i64)
        );
        // A drained one stands for any set left out after it.
        frontier.claimed(&[], None, true, t2, t2);
        let t3 = t2 + Duration::from_millis(5);
        assert_eq!(
            frontier.window_ms(&left_out(&[OTHER]), t3),
            Some(5 + LATE_COMMIT_MARGIN.as_millis() as i64)
        );
    }

    #[test]
    fn a_claim_that_filled_its_batch_proves_nothing_new() {
        let t0 = Instant::now();
        let mut frontier = after_full_walk(t0);
        let t1 = t0 + Duration::from_millis(100);
        let window = frontier.window_ms(&left_out(&[BUSY]), t1);
        frontier.claimed(
            &left_out(&[BUSY]),
            window,
            false,
            t1,
            t1 + Duration::from_millis(1),
        );
        // Still measured from t0: events between t0 and t1 may be left.
        let t2 = t0 + Duration::from_millis(150);
        assert_eq!(
            frontier.window_ms(&left_out(&[BUSY]), t2),
            Some(150 + LATE_COMMIT_MARGIN.as_millis() as i64)
        );
        // A drained one moves it.
        frontier.claimed(
            &left_out(&[BUSY]),
            Some(150),
            true,
            t2,
            t2 + Duration::from_millis(1),
        );
        let t3 = t2 + Duration::from_millis(10);
        assert_eq!(
            frontier.window_ms(&left_out(&[BUSY]), t3),
            Some(10 + LATE_COMMIT_MARGIN.as_millis() as i64)
        );
    }

    #[test]
    fn a_full_walk_comes_back_on_time_and_never_takes_more_than_its_share() {
        let t0 = Instant::now();
        let mut frontier = after_full_walk(t0);
        // Windowed claims do not push the next full walk back.
        let t1 = t0 + Duration::from_secs(2);
        let window = frontier.window_ms(&left_out(&[BUSY]), t1);
        assert!(window.is_some());
        frontier.claimed(
            &left_out(&[BUSY]),
            window,
            true,
            t1,
            t1 + Duration::from_millis(1),
        );
        assert_eq!(
            frontier.window_ms(&left_out(&[BUSY]), t0 + FULL_WALK_EVERY),
            None
        );

        // One that fills its batch is repeated, but only after its share of time.
        let t_full = t0 + FULL_WALK_EVERY;
        let took = Duration::from_millis(100);
        frontier.claimed(&left_out(&[BUSY]), None, false, t_full, t_full + took);
        assert!(frontier
            .window_ms(&left_out(&[BUSY]), t_full + took * 19)
            .is_some());
        assert_eq!(
            frontier.window_ms(&left_out(&[BUSY]), t_full + took * 20),
            None
        );
        // A plain claim that filled its batch (from the head) changes nothing.
        frontier.claimed(&[], None, false, t_full, t_full + took * 100);
        assert_eq!(
            frontier.window_ms(&left_out(&[BUSY]), t_full + took * 20),
            None
        );

        // A full walk of 900 ms is next made 18 s later, not 5 s.
        let t2 = t0 + FULL_WALK_EVERY;
        frontier.claimed(
            &left_out(&[BUSY]),
            None,
            true,
            t2,
            t2 + Duration::from_millis(900),
        );
        let t3 = t2 + Duration::from_secs(10);
        assert!(frontier.window_ms(&left_out(&[BUSY]), t3).is_some());
        assert_eq!(
            frontier.window_ms(&left_out(&[BUSY]), t2 + Duration::from_secs(18)),
            None
        );
    }

    #[test]
    fn a_moved_lane_makes_the_next_claim_walk_everything() {
        let t0 = Instant::now();
        let mut frontier = after_full_walk(t0);
        frontier.staleness().store(true, Ordering::Release);
        let later = t0 + Duration::from_millis(40);
        assert_eq!(frontier.window_ms(&left_out(&[BUSY]), later), None);
    }
}
