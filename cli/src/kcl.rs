//! `import-kcl`: copy a KCL lease table's checkpoints into a shardlease table.

use shardlease::store::dynamodb::kcl;

use crate::connect::Target;
use crate::Error;

/// Plans the copy from `from` into `to` (created if missing) and, with `apply`, writes it.
pub async fn run(
    target: &Target,
    from: &str,
    to: &str,
    apply: bool,
    json: bool,
) -> Result<(), Error> {
    let store = target.store_named(to, true, None).await?;
    let client = target.client().await;
    let plan = kcl::plan(&client, from, &store).await?;
    if !apply {
        if json {
            println!("{}", serde_json::to_string(&plan)?);
        } else {
            print!("{plan}");
            println!("\nA dry run: nothing was written. Run again with --apply to write.");
        }
        return Ok(());
    }
    let report = plan.apply(&store).await?;
    if json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print!("{report}");
    }
    Ok(())
}
