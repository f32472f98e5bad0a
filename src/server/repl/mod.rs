pub mod replica;
