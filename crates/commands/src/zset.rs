//! Commands on sorted sets (Redis's `t_zset.c`). Placeholder: the commands land
//! with the type's representation in `engine::types`.

use crate::table::CommandSpec;

pub(crate) const COMMANDS: &[CommandSpec] = &[];
