//! LOLWUT [VERSION v] [arg ...]: Redis's computer art and version line.
//!
//! Redis 7.0 answers every version but 5 and 6 with `Redis ver. 7.0.15`
//! alone. Version 5 draws Georg Nees's "Schotter" (1968): a grid of
//! squares that fall into more disorder row by row, plotted in Braille
//! characters (2 x 4 dots each); version 6 a skyline in four shades of
//! grey, one coloured space per pixel. Both are random, as Redis's are,
//! so no two replies are alike: what clients can rely on (the shape, the
//! arguments' bounds and errors, the closing lines) is Redis's.
//!
//! The reply is a verbatim string (`txt`) in RESP3, a bulk string in
//! RESP2.

use resp::Args;

use crate::ctx::ConnCtx;
use crate::error::CmdError;
use crate::server::REDIS_VERSION;
use crate::table::{flags::*, CommandSpec, Exec, NO_KEYS};
use crate::util::eq_ic;

pub(crate) const COMMANDS: &[CommandSpec] = &[CommandSpec::new(
    "lolwut",
    -1,
    READONLY | FAST,
    NO_KEYS,
    Exec::Conn(lolwut),
    &["read", "fast"],
)];

fn lolwut(c: &mut ConnCtx<'_>, args: Args<'_>) -> Result<(), CmdError> {
    let mut version = 7;
    if args.len() >= 3 && eq_ic(args.get(1), "version") {
        version = int(args.get(2))?;
    }
    let text = match version {
        5 => {
            let cols = arg(args, 3, 66)?.clamp(1, 1000);
            let per_row = arg(args, 4, 8)?.clamp(1, 200);
            let per_col = arg(args, 5, 12)?.clamp(1, 200);
            schotter(
                cols as usize,
                per_row as usize,
                per_col as usize,
                &mut Rng::new(),
            )
        }
        6 => {
            let cols = arg(args, 3, 80)?.clamp(1, 1000);
            let rows = arg(args, 4, 20)?.clamp(1, 1000);
            skyline(cols as usize, rows as usize, &mut Rng::new())
        }
        _ => format!("Redis ver. {REDIS_VERSION}\n"),
    };
    c.out.verbatim("txt", text.as_bytes());
    Ok(())
}

fn int(a: &[u8]) -> Result<i64, CmdError> {
    resp::string2ll(a).ok_or(CmdError::NotInteger)
}

/// Argument `i` as an integer, `default` when absent.
fn arg(args: Args<'_>, i: usize, default: i64) -> Result<i64, CmdError> {
    if i < args.len() {
        int(args.get(i))
    } else {
        Ok(default)
    }
}

/// xorshift64*: art needs no better randomness, and no shared state.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng(nanos | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `[-1, 1]`.
    fn signed_unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
    }

    /// Uniform in `lo..hi` (`lo` when the range is empty).
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            lo
        } else {
            lo + (self.next() % (hi - lo) as u64) as usize
        }
    }
}

/// A grid of pixels, each a small shade or on/off value.
struct Canvas {
    width: usize,
    height: usize,
    pixels: Vec<u8>,
}

impl Canvas {
    fn new(width: usize, height: usize, fill: u8) -> Canvas {
        Canvas {
            width,
            height,
            pixels: vec![fill; width * height],
        }
    }

    fn set(&mut self, x: i64, y: i64, v: u8) {
        if x >= 0 && y >= 0 && (x as usize) < self.width && (y as usize) < self.height {
            self.pixels[y as usize * self.width + x as usize] = v;
        }
    }

    fn get(&self, x: usize, y: usize) -> u8 {
        if x < self.width && y < self.height {
            self.pixels[y * self.width + x]
        } else {
            0
        }
    }

    /// Bresenham's line from `(x0, y0)` to `(x1, y1)`, both ends drawn.
    fn line(&mut self, (mut x0, mut y0): (i64, i64), (x1, y1): (i64, i64), v: u8) {
        let (dx, dy) = ((x1 - x0).abs(), -(y1 - y0).abs());
        let (sx, sy) = (if x0 < x1 { 1 } else { -1 }, if y0 < y1 { 1 } else { -1 });
        let mut err = dx + dy;
        loop {
            self.set(x0, y0, v);
            if x0 == x1 && y0 == y1 {
                return;
            }
            let e2 = 2 * err;
            if e2 >= dy {
                err += dy;
                x0 += sx;
            }
            if e2 <= dx {
                err += dx;
                y0 += sy;
            }
        }
    }

    /// Rows of Braille characters, each 2 pixels wide and 4 tall.
    fn braille(&self) -> String {
        // Dot bits of the pixel at (dx, dy) within a character.
        const DOTS: [[u32; 4]; 2] = [[0x01, 0x02, 0x04, 0x40], [0x08, 0x10, 0x20, 0x80]];
        let mut out = String::new();
        for row in 0..self.height.div_ceil(4) {
            for col in 0..self.width.div_ceil(2) {
                let mut bits = 0;
                for (dx, column) in DOTS.iter().enumerate() {
                    for (dy, bit) in column.iter().enumerate() {
                        if self.get(col * 2 + dx, row * 4 + dy) != 0 {
                            bits |= bit;
                        }
                    }
                }
                out.push(char::from_u32(0x2800 + bits).unwrap_or(' '));
            }
            out.push('\n');
        }
        out
    }
}

/// Version 5: `cols` characters wide, `per_row` squares across and
/// `per_col` down, each row more rotated and displaced than the last.
fn schotter(cols: usize, per_row: usize, per_col: usize, rng: &mut Rng) -> String {
    let width = cols * 2;
    let padding = if width > 4 { 2 } else { 0 };
    let side = (width - padding * 2) as f64 / per_row as f64;
    let height = (side * per_col as f64) as usize + padding * 2;
    let mut canvas = Canvas::new(width, height, 0);
    for y in 0..per_col {
        // The first rows stand straight; disorder grows downwards.
        let disorder = if y < 2 {
            0.0
        } else {
            y as f64 / per_col as f64
        };
        for x in 0..per_row {
            let cx = padding as f64
                + side * x as f64
                + side / 2.0
                + rng.signed_unit() * disorder * side / 4.0;
            let cy = padding as f64
                + side * y as f64
                + side / 2.0
                + rng.signed_unit() * disorder * side / 4.0;
            let angle = rng.signed_unit() * disorder * std::f64::consts::FRAC_PI_4;
            let radius = side / std::f64::consts::SQRT_2;
            let corner = |k: usize| {
                let a = angle
                    + std::f64::consts::FRAC_PI_4 * 5.0
                    + k as f64 * std::f64::consts::FRAC_PI_2;
                (
                    (cx + radius * a.cos()).round() as i64,
                    (cy + radius * a.sin()).round() as i64,
                )
            };
            for k in 0..4 {
                canvas.line(corner(k), corner(k + 1), 1);
            }
        }
    }
    let mut text = canvas.braille();
    text.push_str(&format!(
        "\nGeorg Nees - schotter, plotter on paper, 1968. Redis ver. {REDIS_VERSION}\n"
    ));
    text
}

/// Version 6's shades, darkest first: ANSI foreground;background pairs.
const SHADES: [&str; 4] = ["30;40", "90;100", "37;47", "97;107"];
const SKY: u8 = 3;

/// Version 6: a skyline `cols` pixels wide and `rows` tall: three ranks of
/// buildings, the farthest palest, with lit windows, under a white sky.
fn skyline(cols: usize, rows: usize, rng: &mut Rng) -> String {
    let mut canvas = Canvas::new(cols, rows, SKY);
    for (rank, shade) in [(0usize, 2u8), (1, 1), (2, 0)] {
        let mut x = rng.range(0, 4);
        while x < cols {
            let w = rng.range(3, 9);
            // Farther ranks stand taller so the nearer ones leave them seen.
            let tallest = rows * (7 - rank * 2) / 8;
            // The top row stays sky, as in Redis's drawings.
            let h = rng
                .range(rows / 4, tallest.max(rows / 4 + 1))
                .max(1)
                .min(rows - 1);
            for px in x..(x + w).min(cols) {
                for py in rows.saturating_sub(h)..rows {
                    canvas.set(px as i64, py as i64, shade);
                }
            }
            // Windows: every other pixel of every other row inside the
            // walls, some of them lit.
            let lit = if shade == 0 { 1 } else { shade + 1 };
            for py in (rows.saturating_sub(h) + 1..rows.saturating_sub(1)).step_by(2) {
                for px in (x + 1..(x + w).min(cols).saturating_sub(1)).step_by(2) {
                    if rng.range(0, 3) == 0 {
                        canvas.set(px as i64, py as i64, lit.min(SKY));
                    }
                }
            }
            x += w + rng.range(0, 4);
        }
    }
    let mut text = String::new();
    for y in 0..rows {
        for x in 0..cols {
            let shade = SHADES[canvas.get(x, y) as usize];
            text.push_str(&format!("\x1b[0;{shade}m \x1b[0m"));
        }
        text.push('\n');
    }
    text.push_str("Dedicated to the 8 bit game developers of past and present.\n");
    text.push_str(&format!(
        "Original 8 bit image from Plaguemon by hikikomori. Redis ver. {REDIS_VERSION}\n"
    ));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TestServer;

    /// The text of a RESP2 bulk reply.
    fn body(reply: &str) -> &str {
        let start = reply.find("\r\n").unwrap() + 2;
        &reply[start..reply.len() - 2]
    }

    #[test]
    fn other_versions_reply_the_version_line() {
        let mut t = TestServer::new(1);
        for argv in [
            &["LOLWUT"][..],
            &["LOLWUT", "foo"],
            &["LOLWUT", "VERSION"],
            &["LOLWUT", "version", "4"],
            &["LOLWUT", "VERSION", "7", "1", "2"],
            &["LOLWUT", "VERSION", "-1"],
        ] {
            assert_eq!(t.run(argv), "$18\r\nRedis ver. 7.0.15\n\r\n", "{argv:?}");
        }
        let bad = "-ERR value is not an integer or out of range\r\n";
        assert_eq!(t.run(&["LOLWUT", "VERSION", "x"]), bad);
        assert_eq!(t.run(&["LOLWUT", "VERSION", "5", "a"]), bad);
        assert_eq!(t.run(&["LOLWUT", "VERSION", "6", "10", "b"]), bad);
        t.run(&["HELLO", "3"]);
        assert_eq!(t.run(&["LOLWUT"]), "=22\r\ntxt:Redis ver. 7.0.15\n\r\n");
    }

    #[test]
    fn schotter_has_redis_shape() {
        let mut t = TestServer::new(1);
        // (args, rows of art, characters per row), as Redis 7.0.15 draws them.
        for (argv, rows, width) in [
            (&["LOLWUT", "VERSION", "5"][..], 49, 66),
            (&["LOLWUT", "VERSION", "5", "1", "1", "1"], 1, 1),
            (&["LOLWUT", "VERSION", "5", "0", "0", "0"], 1, 1),
            (&["LOLWUT", "VERSION", "5", "10", "2", "3"], 7, 10),
            (&["LOLWUT", "VERSION", "5", "1000", "200", "200"], 500, 1000),
            (&["LOLWUT", "VERSION", "5", "5000", "900", "900"], 500, 1000),
        ] {
            let reply = t.run(argv);
            let lines: Vec<&str> = body(&reply).split('\n').collect();
            assert_eq!(lines.len(), rows + 3, "{argv:?}");
            assert!(lines[..rows].iter().all(|l| l.chars().count() == width));
            assert_eq!(
                &lines[rows..],
                [
                    "",
                    "Georg Nees - schotter, plotter on paper, 1968. Redis ver. 7.0.15",
                    ""
                ]
            );
        }
        // One square on a 2 x 2 canvas: Redis's one character.
        let reply = t.run(&["LOLWUT", "VERSION", "5", "1", "1", "1"]);
        assert!(body(&reply).starts_with("⠋\n"));
        // The first row of squares stands straight: the top edge of the
        // default drawing is Redis's.
        let reply = t.run(&["LOLWUT", "VERSION", "5"]);
        assert!(body(&reply).starts_with("⠀⡤⠤⠤⠤⠤⠤⠤⠤⡤⠤⠤⠤⠤⠤⠤⠤⡤"));
    }

    #[test]
    fn skyline_has_redis_shape() {
        let mut t = TestServer::new(1);
        for (argv, rows, cols) in [
            (&["LOLWUT", "VERSION", "6"][..], 20, 80),
            (&["LOLWUT", "VERSION", "6", "10", "5"], 5, 10),
            (&["LOLWUT", "VERSION", "6", "1", "1"], 1, 1),
            (&["LOLWUT", "VERSION", "6", "0", "0"], 1, 1),
            (&["LOLWUT", "VERSION", "6", "2000", "2000"], 1000, 1000),
        ] {
            let reply = t.run(argv);
            let lines: Vec<&str> = body(&reply).split('\n').collect();
            assert_eq!(lines.len(), rows + 3, "{argv:?}");
            for l in &lines[..rows] {
                let pixels: Vec<&str> = l.split("\x1b[0m").filter(|p| !p.is_empty()).collect();
                assert_eq!(pixels.len(), cols);
                assert!(pixels
                    .iter()
                    .all(|p| SHADES.iter().any(|s| *p == format!("\x1b[0;{s}m "))));
            }
            assert_eq!(
                &lines[rows..],
                [
                    "Dedicated to the 8 bit game developers of past and present.",
                    "Original 8 bit image from Plaguemon by hikikomori. Redis ver. 7.0.15",
                    ""
                ]
            );
        }
        // A single pixel is sky, as in Redis.
        let reply = t.run(&["LOLWUT", "VERSION", "6", "1", "1"]);
        assert!(body(&reply).starts_with("\x1b[0;97;107m \x1b[0m\n"));
    }

    #[test]
    fn a_line_covers_both_ends() {
        let mut c = Canvas::new(5, 5, 0);
        c.line((0, 0), (4, 2), 1);
        assert_eq!(c.get(0, 0), 1);
        assert_eq!(c.get(4, 2), 1);
        assert_eq!(c.pixels.iter().filter(|&&p| p == 1).count(), 5);
    }
}
