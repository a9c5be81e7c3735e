//! Proves libtorch links and runs: a tensor operation through tch.

#[test]
fn tch_matmul_runs() {
    let a = tch::Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0]).view([2, 2]);
    let b = a.matmul(&a);
    let v: Vec<f32> = b.flatten(0, -1).try_into().unwrap();
    assert_eq!(v, vec![7.0, 10.0, 15.0, 22.0]);
    // On a machine with a GPU, libtorch_cuda must be linked (build.rs).
    eprintln!("cuda available: {}", tch::Cuda::is_available());
}
