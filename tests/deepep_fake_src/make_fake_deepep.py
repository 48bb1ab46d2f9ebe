"""Write a small git repository with DeepEP v1.x's setup.py interface (tag v1.2.1) and a V2-style commit
(tag v2-jit). Usage: python make_fake_deepep.py DEST. Prints the v1.2.1 commit."""

from __future__ import annotations

import os
import subprocess
import sys

SETUP_V1 = r"""import importlib
import os
import subprocess
from pathlib import Path

import setuptools
from torch.utils.cpp_extension import BuildExtension, CUDAExtension


def get_nvshmem_host_lib_name(base_dir):
    for file in Path(base_dir).joinpath('lib').rglob('libnvshmem_host.so.*'):
        return file.name
    raise ModuleNotFoundError('libnvshmem_host.so not found')


if __name__ == '__main__':
    disable_nvshmem = False
    nvshmem_dir = os.getenv('NVSHMEM_DIR', None)
    nvshmem_host_lib = 'libnvshmem_host.so'
    if nvshmem_dir is None:
        try:
            nvshmem_dir = importlib.util.find_spec("nvidia.nvshmem").submodule_search_locations[0]
            nvshmem_host_lib = get_nvshmem_host_lib_name(nvshmem_dir)
        except (ModuleNotFoundError, AttributeError, IndexError):
            print('Warning: NVSHMEM not found: internode and low-latency features are disabled')
            disable_nvshmem = True
    if not disable_nvshmem:
        assert os.path.exists(nvshmem_dir), f'The specified NVSHMEM directory does not exist: {nvshmem_dir}'

    cxx_flags = ['-O2']
    nvcc_flags = ['-O2']
    sources = ['csrc/deep_ep.cpp', 'csrc/kernels/runtime.cu']
    include_dirs = ['csrc/']
    extra_link_args = []
    if disable_nvshmem:
        cxx_flags.append('-DDISABLE_NVSHMEM')
        nvcc_flags.append('-DDISABLE_NVSHMEM')
    else:
        include_dirs.append(f'{nvshmem_dir}/include')
        extra_link_args.extend([f'-L{nvshmem_dir}/lib', f'-l:{nvshmem_host_lib}',
                                f'-Wl,-rpath,{nvshmem_dir}/lib'])

    if int(os.getenv('DISABLE_SM90_FEATURES', 0)):
        os.environ['TORCH_CUDA_ARCH_LIST'] = os.getenv('TORCH_CUDA_ARCH_LIST', '8.0')
        cxx_flags.append('-DDISABLE_SM90_FEATURES')
        nvcc_flags.append('-DDISABLE_SM90_FEATURES')
        assert disable_nvshmem
    else:
        os.environ['TORCH_CUDA_ARCH_LIST'] = os.getenv('TORCH_CUDA_ARCH_LIST', '9.0')

    if os.environ['TORCH_CUDA_ARCH_LIST'].strip() != '9.0':
        assert int(os.getenv('DISABLE_AGGRESSIVE_PTX_INSTRS', 1)) == 1
        os.environ['DISABLE_AGGRESSIVE_PTX_INSTRS'] = '1'
    if int(os.getenv('DISABLE_AGGRESSIVE_PTX_INSTRS', '1')):
        cxx_flags.append('-DDISABLE_AGGRESSIVE_PTX_INSTRS')
        nvcc_flags.append('-DDISABLE_AGGRESSIVE_PTX_INSTRS')

    print(f' > Arch list: {os.environ["TORCH_CUDA_ARCH_LIST"]}')
    print(f' > NVSHMEM path: {nvshmem_dir}')
    try:
        head = subprocess.check_output(['git', 'rev-parse', '--short', 'HEAD'])
        revision = '+' + head.decode('ascii').rstrip()
    except Exception:
        revision = ''
    setuptools.setup(
        name='deep_ep',
        version='1.2.1' + revision,
        packages=setuptools.find_packages(include=['deep_ep']),
        ext_modules=[CUDAExtension(name='deep_ep_cpp', include_dirs=include_dirs, sources=sources,
                                   extra_compile_args={'cxx': cxx_flags, 'nvcc': nvcc_flags},
                                   extra_link_args=extra_link_args)],
        cmdclass={'build_ext': BuildExtension},
    )
"""

BINDING = r"""// Stand-in for DeepEP's binding: a C-API module (no torch headers: compiles in a second).
#include <Python.h>
#ifndef DISABLE_NVSHMEM
#include <infiniband/mlx5dv.h>
#include <non_abi/nvshmem_version.h>
#define EP_NVSHMEM_VERSION \
    (NVSHMEM_VENDOR_MAJOR_VERSION * 10000 + NVSHMEM_VENDOR_MINOR_VERSION * 100 + NVSHMEM_VENDOR_PATCH_VERSION)
#else
#define EP_NVSHMEM_VERSION 0
#endif

int ep_kernel_count();

static PyObject *nvshmem_version(PyObject *, PyObject *) { return PyLong_FromLong(EP_NVSHMEM_VERSION); }
static PyObject *kernel_count(PyObject *, PyObject *) { return PyLong_FromLong(ep_kernel_count()); }
static PyMethodDef methods[] = {
    {"nvshmem_version", nvshmem_version, METH_NOARGS, "NVSHMEM version compiled in (0: none)"},
    {"kernel_count", kernel_count, METH_NOARGS, "kernels compiled in"},
    {nullptr, nullptr, 0, nullptr}};
static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "deep_ep_cpp", nullptr, -1, methods};
PyMODINIT_FUNC PyInit_deep_ep_cpp(void) { return PyModule_Create(&module); }
"""

KERNEL = r"""// One real kernel so the extension carries SASS for every arch of TORCH_CUDA_ARCH_LIST.
__global__ void ep_scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}
int ep_kernel_count() { return 1; }
"""

INIT = '''import torch  # noqa: F401  (loads libc10/libtorch, which deep_ep_cpp links, like the real package)
import deep_ep_cpp

__version__ = "1.2.1"
NVSHMEM_VERSION = deep_ep_cpp.nvshmem_version()


class Buffer:
    """Stand-in: the real Buffer needs GPUs."""

    num_sms = 20
'''

SETUP_V2 = """# V2-style build (stand-in): JIT kernels over NCCL.
persistent_env_names = ('EP_JIT_CACHE_DIR', 'EP_JIT_PRINT_COMPILER_COMMAND', 'EP_NCCL_ROOT_DIR')
import importlib
find_pkgs_spec = importlib.util.spec_from_file_location('find_pkgs', 'deep_ep/utils/find_pkgs.py')
"""


def write(root: str, rel: str, text: str) -> None:
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)


def git(root: str, *args: str) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="epforge",
        GIT_AUTHOR_EMAIL="ci@epforge.invalid",
        GIT_COMMITTER_NAME="epforge",
        GIT_COMMITTER_EMAIL="ci@epforge.invalid",
        GIT_AUTHOR_DATE="2026-01-01T00:00:00Z",
        GIT_COMMITTER_DATE="2026-01-01T00:00:00Z",
    )
    return subprocess.run(
        ["git", "-C", root, *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


def make(dest: str) -> str:
    """Create the repository at dest; return the commit of tag v1.2.1."""
    os.makedirs(dest, exist_ok=True)
    git(dest, "init", "-q", "-b", "main")
    write(dest, "setup.py", SETUP_V1)
    write(dest, "csrc/deep_ep.cpp", BINDING)
    write(dest, "csrc/kernels/runtime.cu", KERNEL)
    write(dest, "deep_ep/__init__.py", INIT)
    write(dest, "README.md", "Stand-in for DeepEP v1.x's build interface (epforge CI).\n")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "v1.2.1 interface stand-in")
    git(dest, "tag", "v1.2.1")
    v1 = git(dest, "rev-parse", "HEAD")
    write(dest, "setup.py", SETUP_V2)
    write(dest, "deep_ep/utils/find_pkgs.py", "# V2 stand-in\n")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "V2 JIT layout stand-in")
    git(dest, "tag", "v2-jit")
    git(dest, "checkout", "-q", "v1.2.1")
    return v1


if __name__ == "__main__":
    print(make(sys.argv[1]))
