"""The epforge canary: the smallest real PyTorch CUDA extension, used to prove a toolchain end to end.

Built by role cuda_extension like any other extension (TORCH_CUDA_ARCH_LIST, CUDA_HOME and MAX_JOBS come
from the environment torch.utils.cpp_extension reads).
"""

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CUDAExtension

setup(
    name="epforge-canary",
    version="0.1.0",
    description="epforge canary CUDA extension (vector add and a probe of the SASS arch that ran)",
    # src layout: running test_canary.py from this directory cannot shadow the installed package.
    package_dir={"": "src"},
    packages=["epforge_canary"],
    ext_modules=[
        CUDAExtension(
            name="epforge_canary._C",
            sources=["csrc/canary.cpp", "csrc/canary_kernel.cu"],
            extra_compile_args={"cxx": ["-O2"], "nvcc": ["-O2"]},
        )
    ],
    cmdclass={"build_ext": BuildExtension},
    python_requires=">=3.10",
)
