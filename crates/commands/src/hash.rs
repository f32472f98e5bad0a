//! Commands on hashes (Redis's `t_hash.c`). Placeholder: the commands land
//! with the type's representation in `engine::types`.

use crate::table::CommandSpec;

pub(crate) const COMMANDS: &[CommandSpec] = &[];
