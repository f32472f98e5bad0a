//! Loading a function library into a thread's VM: its code runs once in
//! an environment whose only global is the load-time `redis` table
//! (`register_function`, `log`, the `LOG_*` levels and the version), and
//! what it registers is kept, per VM, until the library changes.
//!
//! As Redis 7.0's function_lua.c: a library's globals are read-only both
//! while it loads and when its functions run (`vm`'s `make_env`); the
//! loading code is limited to 500 ms (`busy`); a library's functions share
//! its local variables (upvalues), never anything with other libraries.
//!
//! `register_function` is one Rust function per VM, collecting into the
//! VM's [`VmLibraries::loading`] while a load runs; called at any other time
//! (a function that kept the load-time `redis` table) it raises Redis's
//! error.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use mlua::{Function, Lua, MultiValue, Table, Value};

use super::busy::Kind;
use super::library::{next_id, FunctionInfo, Library, NAME_ERROR};
use super::shebang::ScriptFlags;
use super::vm::{error_text, reply_error, Vm, FUNCTION_CHUNK_NAME};

/// A function as a load registered it.
pub struct Registered {
    pub info: FunctionInfo,
    pub func: Function,
}

/// A library as one VM loaded it: its id and its functions by index.
type LoadedLibrary = (u64, Vec<Function>);

/// What a VM loaded: library name → (library id, its functions by index).
#[derive(Default, Clone)]
pub struct VmLibraries {
    loaded: Rc<RefCell<HashMap<String, LoadedLibrary>>>,
    /// The registry generation `loaded` was last checked against.
    gen: Rc<std::cell::Cell<u64>>,
    /// Registrations of the load in progress (`None`: no load runs).
    loading: Rc<RefCell<Option<Vec<Registered>>>>,
}

/// Builds the load-time `redis` table (the prelude protects it).
pub fn load_api(lua: &Lua, redis: &Table, libs: &VmLibraries) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    for k in [
        "log",
        "LOG_DEBUG",
        "LOG_VERBOSE",
        "LOG_NOTICE",
        "LOG_WARNING",
        "REDIS_VERSION",
        "REDIS_VERSION_NUM",
    ] {
        t.raw_set(k, redis.raw_get::<Value>(k)?)?;
    }
    let sink = libs.loading.clone();
    t.raw_set(
        "register_function",
        lua.create_function(move |_, args: MultiValue| register(&sink, args))?,
    )?;
    Ok(t)
}

/// `redis.register_function`, positional `(name, callback)` or named
/// `{function_name=, callback=, flags=, description=}`, with Redis's
/// checks and texts.
fn register(sink: &Rc<RefCell<Option<Vec<Registered>>>>, args: MultiValue) -> mlua::Result<()> {
    if sink.borrow().is_none() {
        return Err(reply_error(
            b"redis.register_function can only be called on FUNCTION LOAD command",
        ));
    }
    let (name, func, description, flags) = match args.len() {
        1 => named(&args[0])?,
        2 => {
            let Some(name) = lua_string(&args[0]) else {
                return Err(reply_error(
                    b"first argument to redis.register_function must be a string",
                ));
            };
            let Value::Function(f) = &args[1] else {
                return Err(reply_error(
                    b"second argument to redis.register_function must be a function",
                ));
            };
            (name, f.clone(), None, ScriptFlags::default())
        }
        _ => {
            return Err(reply_error(
                b"wrong number of arguments to redis.register_function",
            ))
        }
    };
    if !super::library::valid_name(&name) {
        return Err(reply_error(NAME_ERROR.as_bytes()));
    }
    // INVARIANT: valid_name allows ASCII only.
    let name = String::from_utf8(name).expect("ASCII");
    let mut slot = sink.borrow_mut();
    // INVARIANT: checked at the top; nothing in between ends the load.
    let list = slot.as_mut().expect("a load runs");
    if list.iter().any(|r| r.info.name.eq_ignore_ascii_case(&name)) {
        return Err(reply_error(b"Function already exists in the library"));
    }
    // Every function of a library is a script: flags apply as a
    // shebang's do.
    let flags = ScriptFlags {
        shebang: true,
        ..flags
    };
    list.push(Registered {
        info: FunctionInfo {
            name,
            description,
            flags,
            hop: Default::default(),
        },
        func,
    });
    Ok(())
}

type Parsed = (Vec<u8>, Function, Option<Vec<u8>>, ScriptFlags);

fn named(arg: &Value) -> mlua::Result<Parsed> {
    let Value::Table(t) = arg else {
        return Err(reply_error(
            b"calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).",
        ));
    };
    let (mut name, mut func, mut desc, mut flags) = (None, None, None, ScriptFlags::default());
    for pair in t.pairs::<Value, Value>() {
        let (k, v) = pair?;
        let Some(key) = lua_string(&k) else {
            return Err(reply_error(
                b"named argument key given to redis.register_function is not a string",
            ));
        };
        if key.eq_ignore_ascii_case(b"function_name") {
            name = Some(lua_string(&v).ok_or_else(|| {
                reply_error(
                    b"function_name argument given to redis.register_function must be a string",
                )
            })?);
        } else if key.eq_ignore_ascii_case(b"description") {
            desc = Some(lua_string(&v).ok_or_else(|| {
                reply_error(
                    b"description argument given to redis.register_function must be a string",
                )
            })?);
        } else if key.eq_ignore_ascii_case(b"callback") {
            let Value::Function(f) = v else {
                return Err(reply_error(
                    b"callback argument given to redis.register_function must be a function",
                ));
            };
            func = Some(f);
        } else if key.eq_ignore_ascii_case(b"flags") {
            let Value::Table(ft) = v else {
                return Err(reply_error(
                    b"flags argument to redis.register_function must be a table representing function flags",
                ));
            };
            flags = read_flags(&ft).ok_or_else(|| reply_error(b"unknown flag given"))?;
        } else {
            return Err(reply_error(
                b"unknown argument given to redis.register_function",
            ));
        }
    }
    let Some(name) = name else {
        return Err(reply_error(
            b"redis.register_function must get a function name argument",
        ));
    };
    let Some(func) = func else {
        return Err(reply_error(
            b"redis.register_function must get a callback argument",
        ));
    };
    Ok((name, func, desc, flags))
}

/// `flags={...}`: names from index 1 up to the first nil, any case.
fn read_flags(t: &Table) -> Option<ScriptFlags> {
    let mut f = ScriptFlags::default();
    for i in 1.. {
        let v: Value = t.get(i).ok()?;
        if v.is_nil() {
            break;
        }
        let s = lua_string(&v)?.to_ascii_lowercase();
        match s.as_slice() {
            b"no-writes" => f.no_writes = true,
            b"allow-oom" => f.allow_oom = true,
            b"allow-stale" => f.allow_stale = true,
            b"no-cluster" => f.no_cluster = true,
            b"allow-cross-slot-keys" => f.allow_cross_slot_keys = true,
            _ => return None,
        }
    }
    Some(f)
}

/// `lua_isstring` then `lua_tostring`: strings, and numbers as `%.14g`.
fn lua_string(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(n) => Some(n.to_string().into_bytes()),
        Value::Number(n) => Some(super::vm::lua_number(*n).into_bytes()),
        _ => None,
    }
}

/// Runs a library's code in `vm` (FUNCTION LOAD's `engine->create`):
/// returns what it registered. Errors are Redis's texts without `ERR `:
/// `Error compiling function: ...`, `Error registering functions: ...`,
/// `No functions registered`.
pub fn load_library(
    vm: &mut Vm,
    code: &[u8],
    shebang_len: usize,
) -> Result<Vec<Registered>, String> {
    let lua = vm.lua.clone();
    let Some(make_env) = &vm.make_env else {
        // INVARIANT: libraries load in the functions' VM, which has it.
        return Err("Error registering functions: not the functions' VM".into());
    };
    let (env, done): (Table, Function) = make_env
        .call(())
        .map_err(|e| format!("Error registering functions: {}", error_text(&e)))?;
    let chunk = lua
        .load(&code[shebang_len..])
        .set_name(FUNCTION_CHUNK_NAME)
        .set_mode(mlua::chunk::ChunkMode::Text)
        .set_environment(env)
        .into_function()
        .map_err(|e| format!("Error compiling function: {}", error_text(&e)))?;
    *vm.libs.loading.borrow_mut() = Some(Vec::new());
    vm.hook.begin(Kind::Load, None);
    let r: mlua::Result<MultiValue> = vm.bounded(|| vm.xpcall.call((chunk, vm.handler.clone())));
    vm.hook.end(&lua);
    let regs = vm.libs.loading.borrow_mut().take().unwrap_or_default();
    let mut r = r.map_err(|e| format!("Error registering functions: {}", error_text(&e)))?;
    if !matches!(r.pop_front(), Some(Value::Boolean(true))) {
        let msg = match r.pop_front() {
            Some(Value::Table(t)) => match t.raw_get::<Value>("err") {
                Ok(Value::String(s)) => s.to_string_lossy(),
                _ => "ERR unknown error".into(),
            },
            _ => "ERR unknown error".into(),
        };
        return Err(format!("Error registering functions: {msg}"));
    }
    if regs.is_empty() {
        return Err("No functions registered".into());
    }
    done.call::<()>(())
        .map_err(|e| format!("Error registering functions: {}", error_text(&e)))?;
    Ok(regs)
}

/// FUNCTION LOAD's checks and compilation, on the calling thread's VM: the
/// library to link. The VM keeps what it compiled (under the new id).
pub fn create(
    vm: &mut Vm,
    code: &[u8],
    name: String,
    shebang_len: usize,
) -> Result<Library, String> {
    let regs = load_library(vm, code, shebang_len)?;
    let id = next_id();
    let lib = Library {
        name: name.clone(),
        code: code.into(),
        shebang_len,
        id,
        functions: regs.iter().map(|r| r.info.clone()).collect(),
    };
    vm.libs
        .loaded
        .borrow_mut()
        .insert(name, (id, regs.into_iter().map(|r| r.func).collect()));
    Ok(lib)
}

impl Vm {
    /// Function `idx` of `lib`, loading the library into this VM if it
    /// has not (or has another version of it). Drops libraries no longer
    /// registered when its server's registry changed.
    pub fn library_function(&mut self, lib: &Arc<Library>, idx: usize) -> Result<Function, String> {
        let registry = &self.ops.functions;
        let gen = registry.generation();
        if self.libs.gen.get() != gen {
            self.libs.gen.set(gen);
            let reg = registry.read();
            self.libs
                .loaded
                .borrow_mut()
                .retain(|name, (id, _)| reg.libs.get(name).is_some_and(|l| l.id == *id));
        }
        if let Some((id, funcs)) = self.libs.loaded.borrow().get(&lib.name) {
            if *id == lib.id {
                if let Some(f) = funcs.get(idx) {
                    return Ok(f.clone());
                }
            }
        }
        let regs = load_library(self, &lib.code, lib.shebang_len)?;
        let funcs: Vec<Function> = regs.into_iter().map(|r| r.func).collect();
        let f = funcs.get(idx).cloned().ok_or("Function not found")?;
        self.libs
            .loaded
            .borrow_mut()
            .insert(lib.name.clone(), (lib.id, funcs));
        Ok(f)
    }
}
