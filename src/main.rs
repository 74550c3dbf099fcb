fn main() { println!("ptplab: not yet"); }
