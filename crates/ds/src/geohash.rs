//! Geohash arithmetic as Redis 7.0 computes it (`geohash.c`,
//! `geohash_helper.c`): the 52-bit interleaved score of a point, its
//! decoding back to the centre of its cell, the 8 neighbouring cells, the
//! cells a radius or box search visits, and the haversine distance on
//! Redis's sphere (radius 6372797.560856 m).
//!
//! Every result must equal Redis's to the last bit, because clients see
//! the decoded coordinates printed with 17 decimals and distances with 4,
//! and because which cells a search visits decides the order of unsorted
//! results. So each function follows Redis's arithmetic step by step: the
//! same operations in the same order on `f64` (no fused multiply-add; the
//! trigonometric functions are the C library's, which Rust's `f64`
//! methods call), the same truncating float-to-integer conversions, and
//! Redis's quirks kept on purpose:
//!
//! * latitudes are limited to ±85.05112878 (Web Mercator), and a point on
//!   the upper edge of the range encodes to cell index 2^26, one past the
//!   last (its score is 2^52 or more); decoding clamps it back;
//! * a score that is not a 52-bit geohash (a ZADD into a geo set) decodes
//!   through C's `(uint64_t)` conversion of the double as x86-64 compiles
//!   it ([`score_bits`]);
//! * GEOHASH strings re-encode the decoded point on the standard ±90
//!   latitude range, and the 11th character is always `0`.
//!
//! Nothing here builds a reply or knows a command.

/// Longitude and latitude limits (EPSG:900913).
pub const LONG_MIN: f64 = -180.0;
pub const LONG_MAX: f64 = 180.0;
pub const LAT_MIN: f64 = -85.05112878;
pub const LAT_MAX: f64 = 85.05112878;
/// Bits per coordinate of a stored point: 26 + 26 = 52, exact in a double.
pub const STEP_MAX: u8 = 26;
/// Redis's Earth radius (the quadratic mean radius of WGS-84), in metres.
pub const EARTH_RADIUS_M: f64 = 6372797.560856;
/// Half the Earth's circumference in Mercator metres.
const MERCATOR_MAX: f64 = 20037726.37;
/// `M_PI / 180.0`, folded in double as C does.
const D_R: f64 = std::f64::consts::PI / 180.0;

#[inline]
fn deg_rad(ang: f64) -> f64 {
    ang * D_R
}

#[inline]
fn rad_deg(ang: f64) -> f64 {
    ang / D_R
}

/// An interleaved hash of `step` bits per coordinate (longitude bits at
/// the odd positions, latitude bits at the even ones). `step == 0` marks a
/// cell a search skips (Redis's `GZERO`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Bits {
    pub bits: u64,
    pub step: u8,
}

impl Bits {
    /// Redis's `HASHISZERO`.
    pub fn is_zero(&self) -> bool {
        self.bits == 0 && self.step == 0
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Range {
    pub min: f64,
    pub max: f64,
}

/// A cell: its hash and its longitude and latitude spans.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Area {
    pub hash: Bits,
    pub lon: Range,
    pub lat: Range,
}

const LON_RANGE: Range = Range {
    min: LONG_MIN,
    max: LONG_MAX,
};
const LAT_RANGE: Range = Range {
    min: LAT_MIN,
    max: LAT_MAX,
};

/// Spreads the low 32 bits of `x` to the even positions and those of `y`
/// to the odd ones.
fn interleave64(x: u32, y: u32) -> u64 {
    fn spread(v: u32) -> u64 {
        let mut v = u64::from(v);
        v = (v | (v << 16)) & 0x0000_FFFF_0000_FFFF;
        v = (v | (v << 8)) & 0x00FF_00FF_00FF_00FF;
        v = (v | (v << 4)) & 0x0F0F_0F0F_0F0F_0F0F;
        v = (v | (v << 2)) & 0x3333_3333_3333_3333;
        (v | (v << 1)) & 0x5555_5555_5555_5555
    }
    spread(x) | (spread(y) << 1)
}

/// The inverse of [`interleave64`]: even bits in the low half, odd bits in
/// the high half.
fn deinterleave64(v: u64) -> u64 {
    fn squash(mut v: u64) -> u64 {
        v &= 0x5555_5555_5555_5555;
        v = (v | (v >> 1)) & 0x3333_3333_3333_3333;
        v = (v | (v >> 2)) & 0x0F0F_0F0F_0F0F_0F0F;
        v = (v | (v >> 4)) & 0x00FF_00FF_00FF_00FF;
        v = (v | (v >> 8)) & 0x0000_FFFF_0000_FFFF;
        (v | (v >> 16)) & 0x0000_0000_FFFF_FFFF
    }
    squash(v) | (squash(v >> 1) << 32)
}

/// Redis's `geohashEncode`: the cell of `step` bits per coordinate holding
/// the point, over the given ranges; `None` outside the WGS-84 limits or
/// the ranges, or for a step outside 1..=32.
pub fn encode(lon_r: Range, lat_r: Range, lon: f64, lat: f64, step: u8) -> Option<Bits> {
    let zero = |r: Range| r.min == 0.0 && r.max == 0.0;
    if step == 0 || step > 32 || zero(lat_r) || zero(lon_r) {
        return None;
    }
    if !(LONG_MIN..=LONG_MAX).contains(&lon) || !(LAT_MIN..=LAT_MAX).contains(&lat) {
        return None;
    }
    if lat < lat_r.min || lat > lat_r.max || lon < lon_r.min || lon > lon_r.max {
        return None;
    }
    let scale = (1u64 << step) as f64;
    let lat_off = (lat - lat_r.min) / (lat_r.max - lat_r.min) * scale;
    let lon_off = (lon - lon_r.min) / (lon_r.max - lon_r.min) * scale;
    // C's double -> uint32_t conversion truncates; the offsets are within
    // [0, 2^32) here (at most 2^step).
    Some(Bits {
        bits: interleave64(lat_off as u32, lon_off as u32),
        step,
    })
}

/// [`encode`] over the WGS-84 (Mercator-limited) ranges.
pub fn encode_wgs84(lon: f64, lat: f64, step: u8) -> Option<Bits> {
    encode(LON_RANGE, LAT_RANGE, lon, lat, step)
}

/// Redis's `geohashAlign52Bits`: the hash shifted to a 52-bit score.
pub fn align52(h: Bits) -> u64 {
    h.bits << (52 - u32::from(h.step) * 2)
}

/// The 52-bit score GEOADD stores for a point (`None` outside the limits).
pub fn score_of(lon: f64, lat: f64) -> Option<u64> {
    encode_wgs84(lon, lat, STEP_MAX).map(align52)
}

/// Redis's `geohashDecode`: the cell's spans; `None` for a zero hash.
pub fn decode(lon_r: Range, lat_r: Range, h: Bits) -> Option<Area> {
    if h.is_zero() {
        return None;
    }
    let sep = deinterleave64(h.bits);
    let lat_scale = lat_r.max - lat_r.min;
    let lon_scale = lon_r.max - lon_r.min;
    let ilat = sep as u32;
    let ilon = (sep >> 32) as u32;
    let div = (1u64 << h.step) as f64;
    // `(ilat + 1)` is uint32 arithmetic in C: it wraps.
    Some(Area {
        hash: h,
        lat: Range {
            min: lat_r.min + (f64::from(ilat) / div) * lat_scale,
            max: lat_r.min + (f64::from(ilat.wrapping_add(1)) / div) * lat_scale,
        },
        lon: Range {
            min: lon_r.min + (f64::from(ilon) / div) * lon_scale,
            max: lon_r.min + (f64::from(ilon.wrapping_add(1)) / div) * lon_scale,
        },
    })
}

fn decode_wgs84(h: Bits) -> Option<Area> {
    decode(LON_RANGE, LAT_RANGE, h)
}

/// The centre of a cell, clamped to the limits (`geohashDecodeAreaToLongLat`).
fn area_center(a: &Area) -> [f64; 2] {
    let lon = ((a.lon.min + a.lon.max) / 2.0).clamp(LONG_MIN, LONG_MAX);
    let lat = ((a.lat.min + a.lat.max) / 2.0).clamp(LAT_MIN, LAT_MAX);
    [lon, lat]
}

/// C's `(uint64_t)d` as GCC compiles it for x86-64 (SSE2): below 2^63 a
/// signed truncation (a negative value wraps; one below -2^63, or NaN,
/// gives 2^63), from 2^63 up a truncation of `d - 2^63` with the top bit
/// flipped (0 from 2^64 up, and for +inf). In range it is the exact
/// truncation.
pub fn score_bits(d: f64) -> u64 {
    const TWO63: f64 = 9_223_372_036_854_775_808.0;
    fn cvtt(x: f64) -> u64 {
        // cvttsd2si: the truncation if it fits an i64, else 0x8000...
        if !(-TWO63..TWO63).contains(&x) {
            1 << 63
        } else {
            x as i64 as u64
        }
    }
    if d < TWO63 {
        cvtt(d)
    } else {
        cvtt(d - TWO63) ^ (1 << 63)
    }
}

/// Redis's `decodeGeohash`: the point a stored score stands for, the
/// centre of its 26-bit cell, as GEOPOS reports it.
pub fn decode_score(score: f64) -> [f64; 2] {
    let h = Bits {
        bits: score_bits(score),
        step: STEP_MAX,
    };
    // INVARIANT-free: a step of 26 is never a zero hash.
    decode_wgs84(h).map_or([0.0, 0.0], |a| area_center(&a))
}

/// The 11-character standard geohash GEOHASH replies for a stored score:
/// the decoded point re-encoded over ±180 / ±90, 10 characters of 5 bits
/// and a final `0` (52 bits are not enough for an eleventh).
pub fn geohash_string(score: f64) -> [u8; 11] {
    const ALPHABET: &[u8; 32] = b"0123456789bcdefghjkmnpqrstuvwxyz";
    let [lon, lat] = decode_score(score);
    let r_lon = Range {
        min: -180.0,
        max: 180.0,
    };
    let r_lat = Range {
        min: -90.0,
        max: 90.0,
    };
    // A decoded point is always within the limits, so this encodes; Redis
    // would read a zero hash otherwise, which is what the default gives.
    let bits = encode(r_lon, r_lat, lon, lat, 26).unwrap_or_default().bits;
    let mut out = [b'0'; 11];
    for (i, c) in out.iter_mut().enumerate().take(10) {
        let idx = (bits >> (52 - (i + 1) * 5)) & 0x1f;
        *c = ALPHABET[idx as usize];
    }
    out
}

fn move_x(h: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let mut x = h.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let y = h.bits & 0x5555_5555_5555_5555;
    let zz = 0x5555_5555_5555_5555u64 >> (64 - u32::from(h.step) * 2);
    if d > 0 {
        x = x.wrapping_add(zz + 1);
    } else {
        x |= zz;
        x = x.wrapping_sub(zz + 1);
    }
    x &= 0xaaaa_aaaa_aaaa_aaaau64 >> (64 - u32::from(h.step) * 2);
    h.bits = x | y;
}

fn move_y(h: &mut Bits, d: i8) {
    if d == 0 {
        return;
    }
    let x = h.bits & 0xaaaa_aaaa_aaaa_aaaa;
    let mut y = h.bits & 0x5555_5555_5555_5555;
    let zz = 0xaaaa_aaaa_aaaa_aaaau64 >> (64 - u32::from(h.step) * 2);
    if d > 0 {
        y = y.wrapping_add(zz + 1);
    } else {
        y |= zz;
        y = y.wrapping_sub(zz + 1);
    }
    y &= 0x5555_5555_5555_5555u64 >> (64 - u32::from(h.step) * 2);
    h.bits = x | y;
}

/// The cells a search visits, in Redis's order: the centre, then north,
/// south, east, west, north-east, north-west, south-east, south-west. A
/// zero [`Bits`] is a neighbour left out.
pub type Cells = [Bits; 9];

const N: usize = 1;
const S: usize = 2;
const E: usize = 3;
const W: usize = 4;
const NE: usize = 5;
const NW: usize = 6;
const SE: usize = 7;
const SW: usize = 8;

/// Redis's `geohashNeighbors`, with the centre first (see [`Cells`]).
pub fn neighbors(h: Bits) -> Cells {
    let moves: [(i8, i8); 9] = [
        (0, 0),
        (0, 1),
        (0, -1),
        (1, 0),
        (-1, 0),
        (1, 1),
        (-1, 1),
        (1, -1),
        (-1, -1),
    ];
    moves.map(|(dx, dy)| {
        let mut c = h;
        move_x(&mut c, dx);
        move_y(&mut c, dy);
        c
    })
}

/// Redis's `geohashEstimateStepsByRadius`: the step whose cells are about
/// as large as the radius, coarser towards the poles.
pub fn estimate_steps_by_radius(range_m: f64, lat: f64) -> u8 {
    if range_m == 0.0 {
        return 26;
    }
    let mut range_m = range_m;
    let mut step: i32 = 1;
    while range_m < MERCATOR_MAX {
        range_m *= 2.0;
        step += 1;
    }
    step -= 2;
    if !(-66.0..=66.0).contains(&lat) {
        step -= 1;
        if !(-80.0..=80.0).contains(&lat) {
            step -= 1;
        }
    }
    step.clamp(1, 26) as u8
}

/// What a search covers, around `center` (longitude, latitude); sizes are
/// in the request's unit and `to_m` converts them to metres.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Shape {
    pub center: [f64; 2],
    pub to_m: f64,
    pub kind: ShapeKind,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ShapeKind {
    Radius(f64),
    Box { width: f64, height: f64 },
}

/// Redis's `geohashBoundingBox`: `[min lon, min lat, max lon, max lat]`
/// of the search, the longitude span taken at the edge nearer the pole.
pub fn bounding_box(s: &Shape) -> [f64; 4] {
    let [lon, lat] = s.center;
    let (height, width) = match s.kind {
        ShapeKind::Radius(r) => (s.to_m * r, s.to_m * r),
        ShapeKind::Box { width, height } => (s.to_m * (height / 2.0), s.to_m * (width / 2.0)),
    };
    let lat_delta = rad_deg(height / EARTH_RADIUS_M);
    let lon_delta_top = rad_deg(width / EARTH_RADIUS_M / deg_rad(lat + lat_delta).cos());
    let lon_delta_bottom = rad_deg(width / EARTH_RADIUS_M / deg_rad(lat - lat_delta).cos());
    let lon_delta = if lat < 0.0 {
        lon_delta_bottom
    } else {
        lon_delta_top
    };
    [
        lon - lon_delta,
        lat - lat_delta,
        lon + lon_delta,
        lat + lat_delta,
    ]
}

/// Redis's `geohashCalculateAreasByShapeWGS84`: the centre cell and its
/// neighbours at a step that covers the search, with the neighbours
/// entirely outside its bounding box zeroed.
pub fn cells_for(s: &Shape) -> Cells {
    let [min_lon, min_lat, max_lon, max_lat] = bounding_box(s);
    let [lon, lat] = s.center;
    let radius_m = match s.kind {
        ShapeKind::Radius(r) => r,
        ShapeKind::Box { width, height } => {
            ((width / 2.0) * (width / 2.0) + (height / 2.0) * (height / 2.0)).sqrt()
        }
    } * s.to_m;
    let mut steps = estimate_steps_by_radius(radius_m, lat);
    // The centre is always within the limits (validated or decoded), so it
    // encodes; a zero hash stands in otherwise.
    let at = |steps| encode_wgs84(lon, lat, steps).unwrap_or_default();
    let mut cells = neighbors(at(steps));
    let area_of = |h: Bits| decode_wgs84(h).unwrap_or_default();
    let decrease = area_of(cells[N]).lat.max < max_lat
        || area_of(cells[S]).lat.min > min_lat
        || area_of(cells[E]).lon.max < max_lon
        || area_of(cells[W]).lon.min > min_lon;
    if steps > 1 && decrease {
        steps -= 1;
        cells = neighbors(at(steps));
    }
    let area = area_of(cells[0]);
    if steps >= 2 {
        let mut zero = |which: [usize; 3]| {
            for i in which {
                cells[i] = Bits::default();
            }
        };
        if area.lat.min < min_lat {
            zero([S, SW, SE]);
        }
        if area.lat.max > max_lat {
            zero([N, NE, NW]);
        }
        if area.lon.min < min_lon {
            zero([W, SW, NW]);
        }
        if area.lon.max > max_lon {
            zero([E, SE, NE]);
        }
    }
    cells
}

/// The 52-bit scores `[min, max)` of every stored point inside a cell
/// (`scoresOfGeoHashBox`).
pub fn score_range(h: Bits) -> (u64, u64) {
    let min = align52(h);
    let max = align52(Bits {
        bits: h.bits.wrapping_add(1),
        step: h.step,
    });
    (min, max)
}

/// Distance along a meridian (`geohashGetLatDistance`).
pub fn lat_distance(lat1: f64, lat2: f64) -> f64 {
    EARTH_RADIUS_M * (deg_rad(lat2) - deg_rad(lat1)).abs()
}

/// Great-circle distance in metres by the haversine formula, as Redis's
/// `geohashGetDistance` (a meridian distance when the longitudes' sine
/// term is exactly 0).
pub fn distance(lon1: f64, lat1: f64, lon2: f64, lat2: f64) -> f64 {
    let lon1r = deg_rad(lon1);
    let lon2r = deg_rad(lon2);
    let v = ((lon2r - lon1r) / 2.0).sin();
    if v == 0.0 {
        return lat_distance(lat1, lat2);
    }
    let lat1r = deg_rad(lat1);
    let lat2r = deg_rad(lat2);
    let u = ((lat2r - lat1r) / 2.0).sin();
    let a = u * u + lat1r.cos() * lat2r.cos() * v * v;
    2.0 * EARTH_RADIUS_M * a.sqrt().asin()
}

/// The distance from the shape's centre to `p` in metres if `p` is inside
/// the shape (`geoAppendIfWithinShape`'s test). A NaN distance counts as
/// inside a radius, as in Redis (`dist > radius` is false). A search tests
/// many points: it builds a [`Within`] once instead.
pub fn within(s: &Shape, p: [f64; 2]) -> Option<f64> {
    Within::new(s).test(p)
}

/// [`within`] for many points around one centre: what depends on the
/// centre alone is computed once (the same doubles, so the same
/// distances), and a point of a radius search whose latitude alone puts
/// it outside is rejected before the haversine (about half the points a
/// search reads, each of which cost two sines, two cosines and an arcsine).
#[derive(Clone, Copy, Debug)]
pub struct Within {
    shape: Shape,
    /// The centre's longitude and latitude in radians, and the latitude's
    /// cosine (what `distance` computes for its first point).
    lon1r: f64,
    lat1r: f64,
    cos_lat1: f64,
}

impl Within {
    pub fn new(s: &Shape) -> Within {
        let lat1r = deg_rad(s.center[1]);
        Within {
            shape: *s,
            lon1r: deg_rad(s.center[0]),
            lat1r,
            cos_lat1: lat1r.cos(),
        }
    }

    /// See [`within`].
    #[inline]
    pub fn test(&self, p: [f64; 2]) -> Option<f64> {
        let s = &self.shape;
        let [x1, y1] = s.center;
        let [x2, y2] = p;
        match s.kind {
            ShapeKind::Radius(r) => {
                let r_m = r * s.to_m;
                // The haversine distance is at least the distance along
                // the meridian (`a >= sin²(Δφ/2)`), so a point farther than
                // the radius in latitude alone is outside. Rounding moves
                // either figure by far less than the 1e-9 margin. Points
                // within 60 degrees both ways only: there `a <= 1/2`, so
                // the haversine is never the NaN (`asin` of more than 1,
                // near antipodes) that Redis counts as inside.
                if (x2 - x1).abs() <= 60.0
                    && (y2 - y1).abs() <= 60.0
                    && lat_distance(y1, y2) > r_m * (1.0 + 1e-9)
                {
                    return None;
                }
                let d = self.distance_to(x2, y2);
                // Redis rejects only `d > radius`: a NaN distance is inside.
                match d.partial_cmp(&r_m) {
                    Some(std::cmp::Ordering::Greater) => None,
                    _ => Some(d),
                }
            }
            ShapeKind::Box { width, height } => {
                let (w, h) = (width * s.to_m, height * s.to_m);
                if lat_distance(y2, y1) > h / 2.0 {
                    return None;
                }
                if distance(x2, y2, x1, y2) > w / 2.0 {
                    return None;
                }
                Some(self.distance_to(x2, y2))
            }
        }
    }

    /// `distance(centre, (lon2, lat2))` with the centre's terms computed
    /// once: the same operations on the same doubles.
    #[inline]
    fn distance_to(&self, lon2: f64, lat2: f64) -> f64 {
        let lon2r = deg_rad(lon2);
        let v = ((lon2r - self.lon1r) / 2.0).sin();
        if v == 0.0 {
            return lat_distance(self.shape.center[1], lat2);
        }
        let lat2r = deg_rad(lat2);
        let u = ((lat2r - self.lat1r) / 2.0).sin();
        let a = u * u + self.cos_lat1 * lat2r.cos() * v * v;
        2.0 * EARTH_RADIUS_M * a.sqrt().asin()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scores, positions (as Redis prints them with `%.17Lf`) and GEOHASH
    /// strings taken from Redis 7.0.15.
    const POINTS: &[(f64, f64, u64, &str, &str, &str)] = &[
        (
            13.361389,
            38.115556,
            3479099956230698,
            "13.36138933897018433",
            "38.11555639549629859",
            "sqc8b49rny0",
        ),
        (
            15.087269,
            37.502669,
            3479447370796909,
            "15.08726745843887329",
            "37.50266842333162032",
            "sqdtr74hyu0",
        ),
        (
            -180.0,
            -85.05112878,
            0,
            "-179.99999731779098511",
            "-85.05112751263942528",
            "00bh0hbj200",
        ),
        // The upper edge encodes one cell past the last: the score is
        // 3 * 2^52 and decoding clamps to the limits.
        (
            180.0,
            85.05112878,
            13510798882111488,
            "180.00000000000000000",
            "85.05112877999999910",
            "bp05b5048p0",
        ),
        (
            0.0,
            0.0,
            3377699720527872,
            "0.00000268220901489",
            "0.00000126736058093",
            "s0000000000",
        ),
        (
            -0.0001,
            0.0001,
            1876499844738231,
            "-0.00009924173355103",
            "0.00010012148579364",
            "ebpbpbpbtd0",
        ),
    ];

    #[test]
    fn scores_positions_and_geohash_strings_match_redis() {
        for &(lon, lat, score, plon, plat, gh) in POINTS {
            assert_eq!(score_of(lon, lat), Some(score), "{lon},{lat}");
            let [x, y] = decode_score(score as f64);
            assert_eq!(format!("{x:.17}"), plon, "{lon},{lat}");
            assert_eq!(format!("{y:.17}"), plat, "{lon},{lat}");
            assert_eq!(&geohash_string(score as f64), gh.as_bytes(), "{lon},{lat}");
        }
    }

    #[test]
    fn distances_match_redis() {
        let p = |s: u64| decode_score(s as f64);
        let d = |a: [f64; 2], b: [f64; 2]| distance(a[0], a[1], b[0], b[1]);
        // GEODIST Sicily Palermo Catania: 166274.1516 (m).
        let (pa, ca) = (p(3479099956230698), p(3479447370796909));
        assert_eq!(format!("{:.4}", d(pa, ca)), "166274.1516");
        // The two corners, in km: 18919.8446.
        let (sw, ne) = (p(0), p(13510798882111488));
        assert_eq!(format!("{:.4}", d(sw, ne) / 1000.0), "18919.8446");
        // Around the origin, in feet: 51.8137.
        let (o, n) = (p(3377699720527872), p(1876499844738231));
        assert_eq!(format!("{:.4}", d(o, n) / 0.3048), "51.8137");
        // Same meridian: the latitude shortcut.
        assert_eq!(distance(10.0, 0.0, 10.0, 1.0), lat_distance(0.0, 1.0));
    }

    #[test]
    fn out_of_range_points_do_not_encode() {
        assert_eq!(score_of(180.0001, 0.0), None);
        assert_eq!(score_of(0.0, 85.06), None);
        assert_eq!(score_of(0.0, -85.06), None);
        assert_eq!(score_of(f64::NAN, 0.0), None);
    }

    #[test]
    fn interleaving_round_trips() {
        for (x, y) in [
            (0u32, 0u32),
            (1, 0),
            (0, 1),
            (0x3ff_ffff, 0x155_5555),
            (u32::MAX, 7),
        ] {
            let v = deinterleave64(interleave64(x, y));
            assert_eq!((v as u32, (v >> 32) as u32), (x, y));
        }
    }

    #[test]
    fn c_conversion_of_odd_scores() {
        assert_eq!(score_bits(12.9), 12);
        assert_eq!(score_bits(-1.0), u64::MAX);
        assert_eq!(score_bits(-1e300), 1 << 63);
        assert_eq!(score_bits(f64::NEG_INFINITY), 1 << 63);
        assert_eq!(score_bits(f64::INFINITY), 0);
        assert_eq!(score_bits(1e19), 10_000_000_000_000_000_000);
        assert_eq!(score_bits(1e30), 0);
    }

    #[test]
    fn neighbours_move_one_cell() {
        let h = encode_wgs84(0.0, 0.0, 2).unwrap();
        let c = neighbors(h);
        assert_eq!(c[0], h);
        let a = decode_wgs84(h).unwrap();
        let e = decode_wgs84(c[E]).unwrap();
        let n = decode_wgs84(c[N]).unwrap();
        assert_eq!(e.lon.min, a.lon.max);
        assert_eq!(e.lat, a.lat);
        assert_eq!(n.lat.min, a.lat.max);
        assert_eq!(n.lon, a.lon);
    }

    #[test]
    fn steps_by_radius() {
        assert_eq!(estimate_steps_by_radius(0.0, 0.0), 26);
        assert_eq!(estimate_steps_by_radius(1.0, 0.0), 24);
        assert_eq!(estimate_steps_by_radius(1.0, 70.0), 23);
        assert_eq!(estimate_steps_by_radius(1.0, -81.0), 22);
        assert_eq!(estimate_steps_by_radius(5_000_000.0, 0.0), 2);
        assert_eq!(estimate_steps_by_radius(20_000_000.0, 0.0), 1);
        assert_eq!(estimate_steps_by_radius(1e300, 0.0), 1);
    }

    /// The search's test answers as the plain formula (Redis's
    /// `geoWithinShape`: the haversine distance against the radius) for
    /// every point, the latitude shortcut included: random points near and
    /// far (antipodes too), and points on the circle itself.
    #[test]
    fn within_matches_the_plain_distance_test() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        let plain = |s: &Shape, p: [f64; 2]| -> Option<f64> {
            let ShapeKind::Radius(r) = s.kind else {
                unreachable!()
            };
            let d = distance(s.center[0], s.center[1], p[0], p[1]);
            match d.partial_cmp(&(r * s.to_m)) {
                Some(std::cmp::Ordering::Greater) => None,
                _ => Some(d),
            }
        };
        let mut inside = 0;
        for _ in 0..2000 {
            let center = [rnd() * 360.0 - 180.0, rnd() * 170.0 - 85.0];
            let r = [0.0, 1.0, 150.0, 10_000.0, 2_000_000.0, 20_100_000.0][(rnd() * 6.0) as usize];
            let s = Shape {
                center,
                to_m: 1.0,
                kind: ShapeKind::Radius(r),
            };
            let w = Within::new(&s);
            let spread = [0.001, 0.1, 1.0, 30.0, 200.0][(rnd() * 5.0) as usize];
            for _ in 0..50 {
                let p = decode_score(
                    score_of(
                        (center[0] + (rnd() - 0.5) * spread).clamp(-180.0, 180.0),
                        (center[1] + (rnd() - 0.5) * spread).clamp(-85.0, 85.0),
                    )
                    .unwrap_or(0) as f64,
                );
                let (a, b) = (w.test(p), plain(&s, p));
                assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits), "{s:?} {p:?}");
                inside += usize::from(a.is_some());
            }
            // The antipode (NaN or the half circumference) and the point
            // exactly at the radius along the meridian.
            let anti = [center[0] - 180.0f64.copysign(center[0]), -center[1]];
            assert_eq!(
                w.test(anti).map(f64::to_bits),
                plain(&s, anti).map(f64::to_bits)
            );
            let d = plain(&s, [center[0], center[1] + 0.01]);
            let on = Shape {
                kind: ShapeKind::Radius(d.unwrap_or(0.0)),
                ..s
            };
            let p = [center[0], center[1] + 0.01];
            assert_eq!(
                Within::new(&on).test(p).map(f64::to_bits),
                plain(&on, p).map(f64::to_bits)
            );
        }
        assert!(inside > 1000, "the test reaches points inside ({inside})");
    }
}
