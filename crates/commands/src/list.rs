//! Commands on lists (Redis's `t_list.c`). Placeholder: the commands land
//! with the type's representation in `engine::types`.

use crate::table::CommandSpec;

pub(crate) const COMMANDS: &[CommandSpec] = &[];
