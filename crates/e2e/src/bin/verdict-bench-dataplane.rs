//! `verdict-bench-dataplane`: the data-plane benchmark (needs root; `cargo xtask bench
//! --dataplane`). See `verdict_e2e::dataplane_bench`.

fn main() -> anyhow::Result<()> {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    let args = verdict_e2e::dataplane_bench::Args::parse(&argv)?;
    verdict_e2e::dataplane_bench::run(&args)
}
