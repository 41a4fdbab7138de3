//! Order statistics the benchmarks print (`mod stats;` in each; a folder,
//! so cargo does not take it for a benchmark of its own).
#![allow(dead_code, reason = "shared by several benches, each using a part")]

/// The value at fraction `p` (0..=1) of `sorted`, nearest rank; NaN when
/// there is none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// Prints one line: `name`, then the median, p90, min and max of `values`
/// in `unit`, and how many there were.
pub fn summary(name: &str, mut values: Vec<f64>, unit: &str) {
    values.sort_by(f64::total_cmp);
    println!(
        "{name:<44} median {:>8.3} {unit}  p90 {:>8.3} {unit}  min {:>8.3} {unit}  max {:>8.3} {unit}  (n={})",
        percentile(&values, 0.5),
        percentile(&values, 0.9),
        values.first().copied().unwrap_or(f64::NAN),
        values.last().copied().unwrap_or(f64::NAN),
        values.len()
    );
}
